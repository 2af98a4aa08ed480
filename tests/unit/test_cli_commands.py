"""We test how ``netctl`` offers the kit's commands (the ``netctl.commands`` entry points):
with the kit installed ``netctl bench`` is offered, and building the command line imports
only the kit's small parser module, none of the benches; on an install without
``netctl/kit`` (a node's image) the other commands work and ``bench`` is not offered; and
the two are two distributions: netctl's wheel carries no file of the kit and no entry
point, the kit's wheel (the package ``netctl_kit``) only the kit and ``bench``."""

from __future__ import annotations

import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def python(code: str, *, path: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``code`` run by this interpreter; with ``path``, netctl from there: no site (its .pth
    files would add this checkout's editable install), the dependencies from its
    site-packages."""
    argv, env = [sys.executable, "-c", code], {"PATH": "/usr/bin:/bin"}
    if path is not None:
        argv.insert(1, "-S")
        env["PYTHONPATH"] = ":".join([str(path), *site.getsitepackages()])
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd="/", env=env,
                          check=False)


def test_the_kit_offers_bench_and_the_parser_imports_no_bench() -> None:
    proc = python("import sys\nfrom netctl.commands.cli import build_parser\n"
                  "build_parser().parse_args(['bench', 'churn', '--pods', '3'])\n"
                  "print(sorted(m for m in sys.modules if m.startswith('netctl_kit')))")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['netctl_kit', 'netctl_kit.bench', 'netctl_kit.bench.cli']"


def test_without_the_kit_bench_is_not_offered(tmp_path: Path) -> None:
    """An install as the image makes it: netctl without netctl/kit, its metadata naming
    the entry point all the same."""
    shutil.copytree(REPO / "netctl", tmp_path / "netctl",
                    ignore=shutil.ignore_patterns("kit", "__pycache__"))
    shutil.copytree(REPO / "migrations", tmp_path / "netctl_migrations")
    info = tmp_path / "netctl-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: netctl\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        "[netctl.commands]\nbench = netctl_kit.bench.cli:add_parser\n")
    where = python("import netctl, importlib.util as u\n"
                   "print(netctl.__file__, u.find_spec('netctl_kit'))", path=tmp_path)
    assert where.stdout.split() == [str(tmp_path / "netctl" / "__init__.py"), "None"]
    usage = python("from netctl.commands.cli import main\nmain(['--help'])", path=tmp_path)
    assert usage.returncode == 0, usage.stderr
    assert "ipam" in usage.stdout and "bench" not in usage.stdout
    bench = python("from netctl.commands.cli import main\nmain(['bench', 'churn'])", path=tmp_path)
    assert bench.returncode == 2 and "invalid choice: 'bench'" in bench.stderr
    status = python("import sys\nfrom netctl.commands.cli import main\n"
                    "sys.exit(main(['status', '--socket', '/nonexistent/netctl.sock']))",
                    path=tmp_path)
    assert status.returncode == 2 and "not reachable" in status.stderr, status.stderr


def wheel_of(source: Path, out: Path) -> zipfile.ZipFile:
    """The wheel pip builds of ``source`` (no dependencies, no network)."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(out), str(source)], check=True, capture_output=True,
                   timeout=300)
    return zipfile.ZipFile(next(out.glob("*.whl")))


def test_netctl_and_its_kit_are_two_distributions(tmp_path: Path) -> None:
    # a copy: a build writes build/ and *.egg-info beside the sources
    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "__pycache__", "*.egg-info", ".hypothesis", "tests"))
    product = wheel_of(src, tmp_path / "netctl-wheel")
    names = product.namelist()
    assert "netctl/__init__.py" in names and "netctl/kubeapi/http.py" in names
    assert not [n for n in names if n.startswith(("netctl/kit/", "netctl_kit/"))]
    assert not [n for n in names if n.endswith("entry_points.txt")
                and b"[netctl.commands]" in product.read(n)]
    kit = wheel_of(src / "netctl" / "kit", tmp_path / "kit-wheel")
    files = [n for n in kit.namelist() if ".dist-info/" not in n]
    assert files and all(n.startswith("netctl_kit/") for n in files), files
    assert "netctl_kit/bench/cli.py" in files and "netctl_kit/kubefake/server.py" in files
    points = next(n for n in kit.namelist() if n.endswith("entry_points.txt"))
    assert b"bench = netctl_kit.bench.cli:add_parser" in kit.read(points)
