"""What pyproject.toml packages: checked in ``make test``, before the smoke builds the wheel."""

from __future__ import annotations

from tests.helpers import ROOT


def test_every_package_folder_is_in_the_wheel():
    """pyproject.toml names its packages one by one (jobs/, airflow_plugins/ and dags/ are mapped
    under memwal): a new folder left out of the list is missing from the wheel (memwal.rollup
    was), which only the smoke would find, after make test. Here it fails at once."""
    import tomllib

    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = {folder: name for name, folder in setup["package-dir"].items()}
    folders = sorted(str(p.parent.relative_to(ROOT)) for top in ("memwal", "jobs", "airflow_plugins", "dags")
                     for p in (ROOT / top).rglob("__init__.py"))
    names = {mapped.get(f, f.replace("/", ".")) for f in folders}
    assert names == set(setup["packages"]), names ^ set(setup["packages"])
