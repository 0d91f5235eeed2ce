"""Which notebooks a ``MODEL=`` is for.

``make figures PROFILE=gpu MODEL=meta-llama/Llama-2-7b-hf`` means "the LLM notebooks on Llama-2": the MoE, MLLM and
ViT notebooks keep their profile's lists (a 7B LLM in ``13_vit`` would only stop at its family check after loading),
and ``03_mitigation`` trains its own models. :func:`model_family` names the family of a model without loading it
(the registry, the profiles' lists, the local hub cache, else the hub's config.json); :func:`model_for` gives each
notebook the model it runs.
"""

from __future__ import annotations

from sinklib.core.errors import InputError
from sinklib.pipeline import profiles

# The families each notebook's model may have (what its require_family accepts); () : it loads no model of yours.
NOTEBOOK_FAMILIES: dict[str, tuple[str, ...]] = {
    "00_tour": ("llm",), "01_utilization": ("llm", "moe"), "02_interpretation": ("llm", "moe"),
    "03_mitigation": (), "10_llm": ("llm", "moe"), "11_moe": ("moe",), "12_mllm": ("mllm",), "13_vit": ("vit",),
    "90_scorecard": (),
}


def _listed() -> dict[str, str]:
    """Hub ids in the profiles' lists -> family (the gpu profile's models and the tiny hub rehearsal's)."""
    from sinklib.models import tiny_hub

    out: dict[str, str] = {}
    for family, ids in (("llm", profiles.GU_FAMILIES), ("llm", tiny_hub.LLMS), ("moe", profiles.MOE_MODELS),
                        ("moe", tiny_hub.MOES), ("mllm", profiles.MLLM_MODELS), ("mllm", tiny_hub.MLLMS),
                        ("vit", profiles.VIT_MODELS), ("vit", tiny_hub.VITS)):
        out.update({m: family for m in ids})
    return out


def model_family(name: str) -> str:
    """The family of ``name`` (llm, moe, mllm or vit) without loading its weights: the registry, the profiles'
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
    return model if family in NOTEBOOK_FAMILIES.get(notebook, ("llm", "moe")) else ""


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
                         f"{', '.join(nb for nb, f in NOTEBOOK_FAMILIES.items() if family in f)}.")
    others = [nb for nb in notebooks if not chosen[nb] and NOTEBOOK_FAMILIES.get(nb, ("llm",))]  # not 03 / 90
    line = (f"MODEL={model} ({family}) runs in {', '.join(takers) or 'no notebook'}"
            + (f"; {', '.join(others)} run their profile's own models" if others else ""))
    return chosen, line
