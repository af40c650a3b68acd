"""A refusal deletes nothing: what can be refused before DVC removes a stage's outputs is refused there
(the `inputs` stage checks the files params name and the shipped checkpoint's sha256); where DVC has
already removed them (`dvc repro -s STAGE`, a check that needs the tokenizer), the one-line error ends
with the `dvc checkout` that restores them, and running it gives back the same bytes.

Real DVC in a fresh copy of the project, run up to fetch-data on the shipped tiny model.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess

import pytest

from support import make_fresh_project

pytestmark = pytest.mark.slow

OUTPUTS = ("models/base", "reports/fetch-model", "reports/inputs", "reports/check-params.json", "data")
CHECKPOINT = "src/soarlab/tiny/checkpoint/model.safetensors"
DRAFT = "src/soarlab/tiny/draft/model.safetensors"


def checksums(proj) -> dict[str, str]:
    """sha256 of every file of every output the run up to fetch-data made."""
    sums = {}
    for name in OUTPUTS:
        top = proj / name
        for path in sorted([top] if top.is_file() else top.rglob("*")):
            if path.is_file():
                sums[str(path.relative_to(proj))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return sums


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    proj, env = make_fresh_project(tmp_path_factory.mktemp("refusals") / "proj")
    env["PYTHONPATH"] = str(proj / "src")  # the copy's own code and shipped checkpoint, as in a clone
    lab = Lab(proj, env)
    lab.ok("dvc", "repro", "fetch-data")
    lab.ok("git", "add", "-A")
    lab.ok("git", "commit", "-qm", "outputs made")
    lab.before = checksums(proj)
    assert any(name.startswith("data/") for name in lab.before) and any(n.startswith("models/base/") for n in lab.before)
    return lab


class Lab:
    def __init__(self, proj, env):
        self.proj, self.env, self.before = proj, env, {}

    def run(self, *cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, cwd=self.proj, env=self.env, capture_output=True, text=True, timeout=600)

    def ok(self, *cmd: str) -> str:
        done = self.run(*cmd)
        assert done.returncode == 0, f"{' '.join(cmd)}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
        return done.stdout

    def refused(self, *cmd: str) -> str:
        """The one error line of a failed `cmd`."""
        done = self.run(*cmd)
        assert done.returncode != 0, done.stdout[-2000:]
        errors = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("soarlab: error: ")]
        assert len(errors) == 1 and " Fix: " in errors[0] and len(errors[0]) <= 210, done.stdout + done.stderr
        return errors[0]

    def params(self, *overrides: str) -> None:
        self.ok("soarlab", "params", *overrides)

    def restore(self, restores: str | None = None, rerun: tuple[str, ...] = ()) -> None:
        """Committed params and sources back; the `dvc checkout` the error named, if any; the same bytes,
        but for the outputs of `rerun`, stages that ran (and passed) before the refusal."""
        self.ok("git", "checkout", "--", ".")
        if restores:
            self.ok(*restores.split())
        after = {name: sha for name, sha in checksums(self.proj).items() if not name.startswith(rerun)}
        assert after == {name: sha for name, sha in self.before.items() if not name.startswith(rerun)}


def restore_command(line: str) -> str:
    found = re.search(r"`(dvc checkout [\w-]+)` restores its outputs$", line)
    assert found, line
    return found.group(1)


@pytest.mark.parametrize("content,expected", [
    ('{"question": "a b c", "model_response": "d e"}\n{"question": \n', "line 2 is not valid JSON"),
    ("", "is empty"),
], ids=["malformed", "empty"])
def test_a_bad_speed_set_is_refused_before_fetch_data(lab, content, expected):
    (lab.proj / "mine.jsonl").write_text(content)
    lab.params("bench.dataset.path=mine.jsonl")
    line = lab.refused("dvc", "repro", "fetch-data")
    assert expected in line and "mine.jsonl" in line
    lab.restore(restore_command(line))  # `inputs` only: it re-makes its digests each run
    assert restore_command(line) == "dvc checkout inputs"


def test_a_line_over_the_size_cap_is_refused_before_it_is_tokenized(lab):
    row = json.dumps({"question": "word " * 400, "model_response": "d e"})
    (lab.proj / "mine.jsonl").write_text(json.dumps({"question": "a b c", "model_response": "d e"}) + "\n" + row + "\n")
    lab.params("bench.dataset.path=mine.jsonl", "bench.dataset.max_line_bytes=1000")
    line = lab.refused("dvc", "repro", "fetch-data")
    assert f"mine.jsonl line 2 is {len(row) + 1:,} bytes, over bench.dataset.max_line_bytes (1,000)" in line
    lab.restore(restore_command(line))


def test_a_request_past_the_context_names_its_line_and_both_lengths(lab):
    (lab.proj / "mine.jsonl").write_text(json.dumps({"question": "word " * 5000, "model_response": "d e"}) + "\n")
    lab.params("bench.dataset.path=mine.jsonl")
    line = lab.refused("dvc", "repro", "fetch-data")
    found = re.search(r"mine.jsonl line 1: prompt ([\d,]+) \+ output ([\d,]+) tokens exceed the model's context of 4,096", line)
    assert found and int(found.group(1).replace(",", "")) + int(found.group(2).replace(",", "")) > 4096, line
    lab.restore(restore_command(line), rerun=("reports/inputs/",))  # inputs passed: it holds this file's digest
    assert restore_command(line) == "dvc checkout fetch-data"


def test_a_tampered_checkpoint_is_refused_before_fetch_model(lab):
    path = lab.proj / CHECKPOINT
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    line = lab.refused("dvc", "repro", "fetch-data")
    assert "model.safetensors fail their sha256" in line
    lab.restore(restore_command(line))
    # run alone, fetch-model has no stage before it: DVC removed its outputs, and the error says how to restore them
    path.write_bytes(bytes(data))
    line = lab.refused("dvc", "repro", "-f", "-s", "fetch-model")
    assert "model.safetensors fail their sha256" in line and restore_command(line) == "dvc checkout fetch-model"
    lab.restore(restore_command(line))


def test_a_bad_param_under_repro_s_says_how_to_restore(lab):
    text = (lab.proj / "params.yaml").read_text()
    (lab.proj / "params.yaml").write_text(text.replace("num_requests: 12", "num_requests: -3", 1))
    line = lab.refused("dvc", "repro", "-s", "fetch-data")
    assert "bench.dataset.num_requests" in line and restore_command(line) == "dvc checkout fetch-data"
    assert not (lab.proj / "data").exists(), "what this test is about: DVC removed the outputs before the check"
    lab.restore(restore_command(line))


def test_a_tampered_draft_is_refused_before_any_output_goes(lab):
    lab.params("spec=standalone")  # reads the shipped draft
    path = lab.proj / DRAFT
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    line = lab.refused("dvc", "repro", "fetch-data")
    assert "the shipped tiny draft's model.safetensors fail their sha256" in line and "--draft" in line
    lab.restore(restore_command(line))
