"""Templates of the SOAR submission (prepare_env.sh, prepare_model.sh, Dockerfile); filled by soarlab.stages.package."""

from pathlib import Path

TEMPLATES = Path(__file__).parent


def render(name: str, values: dict[str, str]) -> str:
    """Fill `{{KEY}}` placeholders of a template; a placeholder left unfilled is a bug."""
    text = (TEMPLATES / name).read_text()
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    if "{{" in text:
        raise ValueError(f"template {name}: unfilled placeholder near {text[text.index('{{'):][:40]!r}")
    return text
