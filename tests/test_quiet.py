"""Known-harmless library warnings are dropped one message at a time; real warnings still show."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from soarlab import quiet


@pytest.mark.parametrize("logger,message", [
    ("torchao", "Failed to load /venv/torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so: Could not load this library"),
    ("torchao", "Failed to load /venv/torchao/_C_cutlass_90a.abi3.so: Could not load this library"),
    ("torch.utils._pytree", "<enum 'KernelPreference'> is an Enum subclass and is now natively supported by "
                            "torch.compile as an opaque value type. Calling register_constant() ..."),
    ("transformers.configuration_utils", "You are using a model of type `minicpm_sala` to instantiate a model of "
                                         "type ``. This may be expected if ..."),
])
def test_known_noise_is_dropped(logger, message, caplog):
    quiet.install()
    with caplog.at_level(logging.WARNING):
        logging.getLogger(logger).warning(message)
    assert not caplog.records


@pytest.mark.parametrize("logger,message", [
    ("torchao", "Failed to load /venv/torchao/_C_other.so: Could not load this library"),
    ("torchao", "Skipping import of cpp extensions due to incompatible torch version"),
    ("torch.utils._pytree", "some other pytree deprecation"),
    ("transformers.configuration_utils", "You are using a model of type `llama` to instantiate a model of type `bert`."),
    ("lm_eval.evaluator_utils", "[task] some other lm-eval warning"),
])
def test_real_warnings_of_the_same_loggers_still_show(logger, message, caplog):
    quiet.install()
    quiet.drop("lm_eval.evaluator_utils", r"Metrics were not scored on the same number of documents", "test")
    with caplog.at_level(logging.WARNING):
        logging.getLogger(logger).warning(message)
    assert [r.getMessage() for r in caplog.records] == [message]


def _import_torchao_stderr(install: bool) -> str:
    code = ("from soarlab import quiet; quiet.install(); " if install else "") + "import torchao"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600).stderr


def test_real_torchao_import_is_quiet_only_with_the_filters():
    """The real library: without the filters its import logs the noise (so this test can fail), with them not."""
    noisy = _import_torchao_stderr(install=False)
    if "_C_mxfp8" not in noisy:
        pytest.skip("this torchao build loads its kernels: no noise to drop")
    quiet_stderr = _import_torchao_stderr(install=True)
    assert "_C_mxfp8" not in quiet_stderr and "_C_cutlass_90a" not in quiet_stderr
    assert "is an Enum subclass" not in quiet_stderr


def test_lm_eval_uneven_metric_counts_note_is_dropped_where_lm_eval_runs(caplog):
    from soarlab.accuracy.runner import _quiet_lm_eval

    _quiet_lm_eval()
    with caplog.at_level(logging.WARNING):
        logging.getLogger("lm_eval.evaluator_utils").warning(
            "[soar_correctness] Metrics were not scored on the same number of documents (acc=18, acc_mcq=6).")
        logging.getLogger("lm_eval.api.task").warning(
            "soar_correctness: Custom kwargs can be passed to `--metadata` in console (as json string) or to the TaskManager.")
        logging.getLogger("lm_eval.api.task").warning("soar_correctness: a real warning")
    assert [r.getMessage() for r in caplog.records] == ["soar_correctness: a real warning"]


def test_the_soarlab_command_installs_the_filters(tmp_path):
    from soarlab.cli import main

    target = logging.getLogger("transformers.configuration_utils")
    for f in [f for f in target.filters if isinstance(f, quiet._DropMessage)]:
        target.removeFilter(f)
    assert main(["params", "--output", str(tmp_path / "params.yaml")]) == 0
    assert any(isinstance(f, quiet._DropMessage) for f in target.filters)
