"""Read SOAR-format JSONL files. Every problem names the file and the line, so a bad set is fixed in one go.

`read_jsonl(path, required_fields)` is generic (speed sets, correctness sets): each entry of
`required_fields` is a field name, or a tuple of alternative names of which one must be present
(e.g. `("question", "input", "prompt")`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterator, Sequence

from soarlab.errors import SoarError, short_path

# RULES.md 2: the prompt field of a speed set, in the order the official converter looks for it.
PROMPT_FIELDS = ("question", "input", "prompt")
RESPONSE_FIELD = "model_response"


def _describe(field: str | tuple[str, ...]) -> str:
    return field if isinstance(field, str) else " or ".join(f'"{f}"' for f in field)


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file: a dataset's identity (pinned downloads, runs compared on the same speed set)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def iter_json_lines(path: str | Path, what: str = "dataset", max_line_bytes: int | None = None) -> Iterator[tuple[int, Any]]:
    """(1-based line number, parsed JSON value) of each non-blank line; bad JSON raises naming the line,
    and so does a line over `max_line_bytes` (before it is parsed)."""
    path = Path(path)
    if not path.is_file():
        raise SoarError(f"{what} {path} not found", "give the path of a JSONL file")
    try:
        with path.open(encoding="utf-8") as fh:
            for number, line in enumerate(fh, start=1):
                if max_line_bytes and len(line) * 4 > max_line_bytes and len(line.encode()) > max_line_bytes:
                    raise SoarError(f"{short_path(path)} line {number} is {len(line.encode()):,} bytes, over bench.dataset.max_line_bytes "
                                    f"({max_line_bytes:,})", "shorten that request (the model's context bounds it)")
                if not line.strip():
                    continue
                try:
                    yield number, json.loads(line)
                except json.JSONDecodeError as exc:
                    raise SoarError(
                        f"{short_path(path)} line {number} is not valid JSON ({exc.msg})", "write one JSON object per line"
                    ) from None
    except UnicodeDecodeError:
        raise SoarError(f"{what} {path} is not UTF-8 text ({_binary_kind(path)})",
                        "give a UTF-8 JSONL file: `gunzip` a .gz, `iconv -f UTF-16 -t UTF-8` a UTF-16 file") from None


def _binary_kind(path: Path) -> str:
    """What a file that is not UTF-8 most likely is, from its first bytes."""
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head[:2] == b"\x1f\x8b":
        return "it is gzip-compressed"
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "it is UTF-16"
    return "it looks binary"


def read_jsonl(path: str | Path, required_fields: Sequence[str | tuple[str, ...]] = (),
               max_line_bytes: int | None = None) -> list[dict]:
    """All rows of a JSONL file, each a dict with its 1-based `line` number under the key `_line`.

    Blank lines are skipped. A line that is not a JSON object, or lacks a required field
    (or all of a tuple's alternatives), raises SoarError naming the line. An empty file raises too.
    """
    rows: list[dict] = []
    for number, row in iter_json_lines(path, max_line_bytes=max_line_bytes):
        if not isinstance(row, dict):
            raise SoarError(f"{path} line {number} is not a JSON object", "write one JSON object per line")
        for field in required_fields:
            names = (field,) if isinstance(field, str) else field
            if not any(name in row for name in names):
                raise SoarError(
                    f"{path} line {number} has no {_describe(field)} field",
                    "give every line the fields of the SOAR format "
                    + ", ".join(_describe(f) for f in required_fields),
                )
        row["_line"] = number
        rows.append(row)
    if not rows:
        raise SoarError(f"dataset {short_path(path)} is empty", "give a JSONL file with at least one request line")
    return rows


def prompt_of(row: dict) -> str:
    """The prompt text of a speed-set row: `question`, else `input`, else `prompt` (RULES.md 2)."""
    for name in PROMPT_FIELDS:
        if name in row:
            value = row[name]
            break
    else:  # pragma: no cover - read_speed_set checked it
        raise KeyError("question")
    return value


def read_speed_set(path: str | Path, max_line_bytes: int | None = None) -> list[dict]:
    """Rows `{"prompt": str, "model_response": str, "line": int}` of a SOAR-format speed set, in file order."""
    rows = []
    for row in read_jsonl(path, [PROMPT_FIELDS, RESPONSE_FIELD], max_line_bytes):
        prompt, response = prompt_of(row), row[RESPONSE_FIELD]
        if not isinstance(prompt, str) or not isinstance(response, str):
            raise SoarError(
                f"{path} line {row['_line']}: the prompt and model_response must be strings",
                "write the question and the reference answer as JSON strings",
            )
        rows.append({"prompt": prompt, "model_response": response, "line": row["_line"]})
    return rows
