"""We test these aspects of the plugin's fuzz targets (tests/fuzz/, ``make fuzz``):

- each builds;
- each input kept as a regression test (``regress-…`` in its corpus: an input that made it
  report, kept once the plugin was fixed) runs clean through it;
- a short run of each — its seed corpus first, then mutations of it — ends with exit 0 and
  leaves no crash, leak, timeout or out-of-memory input;
- the committed seed corpus holds every seed tests/fuzz/corpus.py makes from the plugin
  tests' current inputs.

The long runs (millions of inputs each) are ``make fuzz-run``'s (docs/testing.md). The
targets need clang-14 and libclang-rt-14-dev (``make setup`` installs them): without
them these tests are skipped.
"""

from __future__ import annotations

import glob
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.fuzz import corpus

TARGETS = ("json", "reply", "frame")
# of mutations per target, after its corpus: a smoke run (a few thousand inputs), not a
# search, which is make fuzz-run's (millions); 1 s rather than 3 s saves about 2 s a target
SECONDS = 1
MISSING = ("clang-14 is not installed" if shutil.which("clang-14") is None else
           "libFuzzer is not installed (libclang-rt-14-dev)" if not glob.glob(
               "/usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a")
           else "")

pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"fuzz targets: {MISSING} "
                                "(make system-packages installs them)")


@pytest.fixture(scope="module")
def built() -> Path:
    """``make fuzz``: the targets rebuilt when a source is newer."""
    proc = subprocess.run(["make", "-s", "-C", str(ROOT), "fuzz"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return ROOT / "build" / "fuzz"


def test_the_corpus_holds_the_tests_inputs() -> None:
    assert corpus.missing() == []


@pytest.mark.parametrize("target", TARGETS)
def test_the_inputs_kept_as_regression_tests_run_clean(built: Path, target: str) -> None:
    """Each ``regress-…`` input of the corpus (one that made the target report, kept when
    the plugin was fixed) through the target alone."""
    inputs = sorted(str(p) for p in (corpus.CORPUS / target).glob("regress-*"))
    if not inputs:
        return
    proc = subprocess.run([str(built / f"fuzz_{target}"), *inputs], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stderr.count("Executed ") == len(inputs), proc.stderr[-4000:]


@pytest.mark.parametrize("target", TARGETS)
def test_a_short_run_finds_nothing(built: Path, target: str, tmp_path: Path) -> None:
    """What the run adds goes to a directory of its own, never into the committed
    corpus; an input it finds would be left in tmp_path as crash-…, leak-… and so on."""
    work = tmp_path / "corpus"
    work.mkdir()
    proc = subprocess.run(
        [str(built / f"fuzz_{target}"), f"-max_total_time={SECONDS}", "-timeout=10",
         f"-dict={ROOT / 'tests' / 'fuzz' / 'json.dict'}", f"-artifact_prefix={tmp_path}/",
         str(work), str(corpus.CORPUS / target)],
        capture_output=True, text=True, timeout=120)
    findings = [p.name for p in tmp_path.iterdir() if p.name != "corpus"]
    assert proc.returncode == 0 and findings == [], proc.stderr[-4000:]
    assert "DONE" in proc.stderr and "INITED" in proc.stderr, proc.stderr[-4000:]
