"""What a package people can cite and install needs (issue 46 items 9-10): its licence, the bundled models' licence
notices, a citation file, and dependency ranges that keep an installed torch."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib
import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _requirement(name: str) -> SpecifierSet:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    spec = next(d for d in deps if re.match(rf"{name}\b", d))
    return SpecifierSet(spec[len(name):])


def test_the_licence_file_is_the_one_pyproject_names():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"]["text"] == "MIT"
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")


def test_every_offline_package_has_its_licence_notice():
    listed = [line.split("==")[0] for line in (ROOT / "data" / "offline-packages.txt").read_text().splitlines()
              if line and not line.startswith("#")]
    notices = (ROOT / "data" / "LICENSES.md").read_text(encoding="utf-8")
    families = {re.sub(r"-part\d+$", "", name) for name in listed}
    assert all(f"`{family}" in notices for family in families), families
    assert "Gemma Terms of Use" in notices and "public domain" in notices


def test_the_citation_file_parses_and_names_the_papers_with_their_arxiv_ids():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0" and cff["license"] == "MIT"
    ids = {i["value"] for ref in cff["references"] for i in ref["identifiers"]}
    assert {"arXiv:2410.10781", "arXiv:2309.17453"} <= ids
    assert all(ref["authors"] and ref["title"] for ref in cff["references"])


def test_torch_is_a_range_that_keeps_an_installed_torch_and_holds_the_locked_one():
    torch_spec, vision_spec = _requirement("torch"), _requirement("torchvision")
    assert Version("2.11.0") in torch_spec  # what the GPU path ran on
    lock = (ROOT / "requirements.lock").read_text(encoding="utf-8")
    locked = {name: Version(v) for name, v in re.findall(r"^(torch|torchvision)==([\w.]+)", lock, re.M)}
    assert locked["torch"] in torch_spec and locked["torchvision"] in vision_spec
    assert not str(torch_spec).startswith("==")


def test_the_readme_points_to_licence_notices_and_citation():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "LICENSE" in readme and "data/LICENSES.md" in readme and "CITATION.cff" in readme
