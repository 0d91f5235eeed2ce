"""Every notebook's protocol by name, and which notebooks a ``MODEL=`` is for.

:data:`PROTOCOLS` maps each notebook to its :class:`~sinklib.core.protocol.NotebookProtocol` -- its sizes per
profile, the gpu profile's cuts, the model families it takes, its CPU budget, its first-run seconds and its plan
steps -- read from its protocol module beside its research code: every ``protocol.py`` or ``<name>_protocol.py``
under ``sinklib/`` (:mod:`sinklib.core.protocol`, the record's type, aside). A new notebook adds its protocol module
and nothing here; :func:`protocol` gives a notebook without one no sizes, no steps and no budget.

``make figures PROFILE=gpu MODEL=meta-llama/Llama-2-7b-hf`` means "the LLM notebooks on Llama-2": the MoE, MLLM and
ViT notebooks keep their profile's lists (a 7B LLM in ``13_vit`` would only stop at its family check after loading),
and ``03_mitigation`` trains its own models. :func:`model_family` names the family of a model without loading it
(the registry, the protocols' model lists, the local hub cache, else the hub's config.json); :func:`model_for` gives
each notebook the model it runs; :func:`route` does so for a whole run.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from sinklib.core.errors import InputError
from sinklib.core.protocol import NotebookProtocol

PACKAGE = Path(__file__).resolve().parents[1]  # sinklib/


def protocol_modules(root: Path = PACKAGE) -> list[str]:
    """The protocol modules' names, sorted: every ``protocol.py`` and ``*_protocol.py`` under ``root`` but
    ``core/protocol.py`` (the record's type)."""
    files = {*root.rglob("protocol.py"), *root.rglob("*_protocol.py")} - {root / "core" / "protocol.py"}
    return sorted(".".join(("sinklib", *f.relative_to(root).with_suffix("").parts)) for f in files)


def _collect() -> tuple[dict[str, NotebookProtocol], dict[str, str]]:
    """(notebook -> its protocol, notebook -> its protocol module), in the notebooks' numbered order; two modules
    for one notebook are an error."""
    found: dict[str, NotebookProtocol] = {}
    homes: dict[str, str] = {}
    for name in protocol_modules():
        p = importlib.import_module(name).PROTOCOL
        if p.name in found:
            raise RuntimeError(f"two protocol modules for {p.name}: {homes[p.name]} and {name}")
        found[p.name], homes[p.name] = p, name
    return {n: found[n] for n in sorted(found)}, {n: homes[n] for n in sorted(homes)}


PROTOCOLS, HOMES = _collect()  # notebook -> NotebookProtocol, notebook -> its module's name


def protocol(notebook: str) -> NotebookProtocol:
    """``notebook``'s protocol; for a notebook without one, a record with no sizes, cuts, budget or steps that takes
    an LLM or a MoE (as :func:`sinklib.pipeline.notebook.start` does by default)."""
    return PROTOCOLS.get(notebook) or NotebookProtocol(notebook, families=("llm", "moe"))


# ------------------------------------------------------------------------------------------- which model runs where
def _listed() -> dict[str, str]:
    """Models in the protocols' lists -> family (a list's family is its notebook's first): the gpu profile's hub ids,
    the tiny hub rehearsal's and the registry's offline names."""
    return {m: p.families[0] for p in PROTOCOLS.values() if p.families
            for sizes in p.sizes.values() for m in getattr(sizes, "models", ())}


def model_family(name: str) -> str:
    """The family of ``name`` (llm, moe, mllm or vit) without loading its weights: the registry, the protocols'
    lists, then the model's config.json (from the local hub cache, or the hub when online). A one-line
    :class:`InputError` when none of them knows it."""
    from sinklib.models.registry import REGISTRY

    if name in REGISTRY:
        return REGISTRY[name].family
    listed = _listed().get(name)
    if listed:
        return listed
    if name.startswith("timm/"):
        return "vit"
    try:
        from transformers import AutoConfig

        from sinklib.models.load import infer_family

        return infer_family(AutoConfig.from_pretrained(name))
    except Exception as err:  # offline and not cached, a typo, a gated repository
        raise InputError(f"cannot tell which notebooks MODEL={name} is for: it is not in sinklib's lists and its "
                         f"config.json could not be read ({type(err).__name__}); check the id, or choose the "
                         f"notebooks with NOTEBOOKS=.") from None


def model_for(notebook: str, model: str, family: str | None) -> str:
    """The model ``notebook`` runs: ``model`` when its family is one the notebook takes, else "" (its profile's own
    list). ``family``: :func:`model_family` of ``model`` (None with no model)."""
    if not model:
        return ""
    return model if family in protocol(notebook).families else ""


def route(model: str, notebooks: list[str], explicit: bool) -> tuple[dict[str, str], str]:
    """Per notebook the model it runs (:func:`model_for`), and a line saying so. ``explicit``: the notebooks were
    chosen by name (NOTEBOOKS=); then a model none of them can take is an error, not a silent no-op."""
    if not model:
        return {nb: "" for nb in notebooks}, ""
    family = model_family(model)
    chosen = {nb: model_for(nb, model, family) for nb in notebooks}
    takers = [nb for nb, m in chosen.items() if m]
    if not takers and explicit:
        raise InputError(f"MODEL={model} is a {family} model, and none of the chosen notebooks "
                         f"({', '.join(notebooks)}) takes one; the {family} notebooks: "
                         f"{', '.join(nb for nb, p in PROTOCOLS.items() if family in p.families)}.")
    others = [nb for nb in notebooks if not chosen[nb] and protocol(nb).families]  # not 03 / 90
    line = (f"MODEL={model} ({family}) runs in {', '.join(takers) or 'no notebook'}"
            + (f"; {', '.join(others)} run their profile's own models" if others else ""))
    return chosen, line
