"""wattlab.extras: which extra installs a missing package, the install line for how wattlab was
installed (PEP 610's direct_url.json), and tests/conftest.py's rule for tests that need an extra
(only a --without-extras run skips them)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from wattlab import extras
from wattlab.errors import WattlabError
from wattlab.extras import EXTRA_OF_MODULE, MissingExtraError

ROOT = Path(__file__).resolve().parents[1]


def declared_extras() -> dict[str, list[str]]:
    """pyproject.toml's [project.optional-dependencies]: extra -> the distributions it names
    (read by hand: tomllib is 3.11+ and wattlab supports 3.10)."""
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    found: dict[str, list[str]] = {}
    for name, body in re.findall(r"^(\w+) = \[(.*?)\]$", section, flags=re.M | re.S):
        found[name] = [re.split(r"[<>=\[; ]", r)[0].lower() for r in re.findall(r'"([^"]+)"', body)]
    return found


def test_every_module_names_an_extra_that_installs_it():
    declared = declared_extras()
    assert {"train", "codecarbon", "parquet", "mlflow", "dev"} <= set(declared)
    for module, extra in EXTRA_OF_MODULE.items():
        assert extra in declared, (module, extra)
    # every distribution of every extra but dev is reached by a module of the table
    dist_of = importlib.metadata.packages_distributions()
    for extra, dists in declared.items():
        if extra == "dev":
            continue
        modules = [m for m, e in EXTRA_OF_MODULE.items() if e == extra]
        assert modules, f"extra {extra!r} has no module in EXTRA_OF_MODULE"
        for module in modules:
            if module in dist_of:  # installed here: its distribution is one the extra names
                names = {d.lower().replace("_", "-") for d in dist_of[module]}
                assert names & set(dists), (module, names, extra, dists)


# -- the install line ------------------------------------------------------------------------


class FakeDistribution:
    def __init__(self, direct_url: dict | None) -> None:
        self.direct_url = direct_url

    def read_text(self, name: str) -> str | None:
        if name == "direct_url.json" and self.direct_url is not None:
            return json.dumps(self.direct_url)
        return None


@pytest.fixture
def installed(monkeypatch, tmp_path):
    """Pretend wattlab was installed as ``direct_url`` says, its package living in ``root``."""

    def install(direct_url: dict | None, root: Path, *, found: bool = True) -> None:
        def distribution(name: str):
            assert name == "wattlab"
            if not found:
                raise importlib.metadata.PackageNotFoundError(name)
            return FakeDistribution(direct_url)

        monkeypatch.setattr(extras.importlib.metadata, "distribution", distribution)
        monkeypatch.setattr(extras, "_package_root", lambda: root)

    monkeypatch.chdir(tmp_path)
    return install


def clone(path: Path) -> Path:
    (path / "wattlab").mkdir(parents=True)
    (path / "pyproject.toml").write_text("[project]\nname = 'wattlab'\n")
    return path


def test_an_editable_clone_in_the_working_folder_is_dot(installed, tmp_path):
    root = clone(tmp_path)
    installed({"url": root.as_uri(), "dir_info": {"editable": True}}, root)
    assert extras.pip_arguments("train") == "install -e '.[train]'"


def test_an_editable_clone_elsewhere_is_its_path(installed, tmp_path):
    root = clone(tmp_path / "my clone")
    installed({"url": root.as_uri(), "dir_info": {"editable": True}}, root)
    assert extras.pip_arguments("mlflow") == f"install -e '{root}[mlflow]'"


def test_a_clone_on_pythonpath_that_another_clone_was_installed_from(installed, tmp_path):
    running = clone(tmp_path / "work")  # PYTHONPATH=work, while site-packages points at main
    other = clone(tmp_path / "main")
    installed({"url": other.as_uri(), "dir_info": {"editable": True}}, running)
    assert extras.pip_arguments("train") == f"install -e '{running}[train]'"


def test_a_clone_on_pythonpath_never_installed(installed, tmp_path):
    root = clone(tmp_path / "src")
    installed(None, root, found=False)
    assert extras.pip_arguments("train") == f"install -e '{root}[train]'"


def test_from_a_package_index(installed, tmp_path):
    site = tmp_path / "site-packages"
    (site / "wattlab").mkdir(parents=True)
    installed(None, site)
    assert extras.pip_arguments("codecarbon") == "install 'wattlab[codecarbon]'"


def test_from_a_wheel_file(installed, tmp_path):
    site = tmp_path / "site-packages"
    (site / "wattlab").mkdir(parents=True)
    wheel = tmp_path / "wattlab-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK")
    installed({"url": wheel.as_uri(), "archive_info": {}}, site)
    assert extras.pip_arguments("train") == f"install '{wheel}[train]'"


def test_from_a_wheel_url(installed, tmp_path):
    site = tmp_path / "site-packages"
    (site / "wattlab").mkdir(parents=True)
    url = "https://example.org/wattlab-0.1.0-py3-none-any.whl"
    installed({"url": url, "archive_info": {}}, site)
    assert extras.pip_arguments("train") == f"install 'wattlab[train] @ {url}'"


def test_from_a_git_url(installed, tmp_path):
    site = tmp_path / "site-packages"
    (site / "wattlab").mkdir(parents=True)
    url = "https://git.example.org/wattlab.git"
    installed({"url": url, "vcs_info": {"vcs": "git", "commit_id": "abc123"}}, site)
    assert extras.pip_arguments("slurm") == f"install 'wattlab[slurm] @ git+{url}@abc123'"


def test_copied_from_a_folder(installed, tmp_path):
    site = tmp_path / "site-packages"
    (site / "wattlab").mkdir(parents=True)
    source = clone(tmp_path / "src")
    installed({"url": source.as_uri(), "dir_info": {}}, site)
    assert extras.pip_arguments("step") == f"install '{source}[step]'"


def test_the_pip_beside_this_interpreter_is_plain_pip(monkeypatch):
    here = Path(sys.executable).parent
    monkeypatch.setattr(extras.shutil, "which", lambda name: str(here / name))
    assert extras.install_line("train").startswith("pip install ")
    monkeypatch.setattr(extras.shutil, "which", lambda name: None)  # none on PATH
    assert extras.install_line("train").startswith(f"{sys.executable} -m pip install ")


def test_this_checkout_gets_its_clone_line(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert extras.pip_arguments("train") == "install -e '.[train]'"


def test_require_is_one_sentence_exit_2():
    with pytest.raises(MissingExtraError) as caught:
        extras.require("no_such_module_for_wattlab", "parquet", "parquet export", instead="use csv")
    said = str(caught.value)
    assert isinstance(caught.value, WattlabError) and caught.value.exit_code == 2
    assert said.startswith("parquet export needs the 'no_such_module_for_wattlab' package")
    assert "(wattlab's 'parquet' extra)" in said and "use csv, or install it with: " in said
    assert said.endswith(extras.install_line("parquet")) and "\n" not in said


def test_a_missing_extra_is_found_in_an_error_chain(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    try:
        try:
            import torch  # noqa: F401
        except ImportError as inner:
            raise RuntimeError("building the model failed") from inner
    except RuntimeError as outer:
        assert extras.missing_extra_module(outer) == "torch"
    error = ModuleNotFoundError("No module named 'numpy'", name="numpy")  # not an extra
    assert extras.missing_extra_module(error) is None


@pytest.mark.extra("train")
def test_an_extra_module_that_is_installed_is_not_called_missing():
    # a broken torch submodule is not a missing extra: its own traceback says more
    error = ModuleNotFoundError("No module named 'torch._nope'", name="torch._nope")
    assert extras.missing_extra_module(error) is None


# -- tests/conftest.py: who may skip for a missing extra ---------------------------------------

PROBE = textwrap.dedent(
    """
    import sys

    import pytest

    sys.modules["stumpy"] = None  # as if the 'step' extra were not installed

    def test_importorskip():
        pytest.importorskip("stumpy")

    @pytest.mark.extra("step")
    def test_marked():
        pass

    def test_unmarked_needs_it():
        import stumpy  # noqa: F401
    """
)


def run_probe(tmp_path: Path, source: str, *flags: str) -> str:
    (tmp_path / "test_probe.py").write_text(source)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-c", str(ROOT / "pyproject.toml"),
         "--rootdir", str(tmp_path), "-p", "no:cacheprovider", "-p", "no:xdist", "-v", "-rs",
         "test_probe.py", *flags],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return done.stdout + done.stderr


def outcomes(said: str) -> dict[str, str]:
    return dict(re.findall(r"^\S+::(test_\w+) (PASSED|FAILED|SKIPPED|ERROR)", said, re.M))


def test_the_main_run_fails_what_a_floors_run_skips(tmp_path):
    main = outcomes(run_probe(tmp_path, PROBE))
    assert main == {
        "test_importorskip": "FAILED",  # never a silent skip where every extra should be
        "test_marked": "PASSED",  # the marker changes nothing here
        "test_unmarked_needs_it": "FAILED",
    }, main
    floors = outcomes(run_probe(tmp_path, PROBE, "--without-extras"))
    assert floors == {
        "test_importorskip": "SKIPPED",
        "test_marked": "SKIPPED",
        "test_unmarked_needs_it": "FAILED",  # it must say which extra it needs
    }, floors


def test_a_module_that_imports_an_extra_is_skipped_whole_only_without_extras(tmp_path):
    source = 'import sys\nsys.modules["stumpy"] = None\nimport stumpy\n\ndef test_x():\n    pass\n'
    said = run_probe(tmp_path, source, "--without-extras")
    assert "needs wattlab's 'step' extra" in said and " 1 skipped" in said, said
    said = run_probe(tmp_path, source)
    assert "ModuleNotFoundError" in said and "1 error" in said, said


def test_a_marker_must_name_an_extra(tmp_path):
    source = "import pytest\n\n@pytest.mark.extra('gpu')\ndef test_x():\n    pass\n"
    said = run_probe(tmp_path, source, "--without-extras")
    assert "names no extra of pyproject.toml: ['gpu']" in said, said
