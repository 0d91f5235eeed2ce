"""Loading a model by name.

A short name maps to a :class:`~sinklib.core.loaded.ModelSpec` in :mod:`sinklib.models.registry` (where the weights
come from, which family the model belongs to, whether it works offline). :func:`load_model` turns a name -- or any
Hugging Face hub id -- into a :class:`~sinklib.core.loaded.LoadedModel` that carries the model, its tokenizer and the
shape facts notebooks need.

Offline GGUF models are dequantised once and cached (:mod:`sinklib.models.conversion`); later loads read the cache.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import torch

from sinklib.core.errors import InputError, UnknownModelError, WrongFamilyError
from sinklib.core.loaded import LoadedModel, ModelSpec, resolve_device
from sinklib.models.conversion import build_once, convert_gguf, converted_path
from sinklib.models.registry import REGISTRY

# ----------------------------------------------------------------------------------------------------- resolution
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")


def check_hub_id(name: str) -> None:
    """Refuse, in one line, a name that cannot be a Hugging Face hub id: ``owner/name``, each part letters, digits,
    '-', '_' or '.', not starting with '-' or '.', not ending with '-' or '.', without '--' or '..' (the hub's own
    rule, :func:`huggingface_hub.utils.validate_repo_id`), e.g. ``meta-llama/`` or ``a b/c``."""
    if HUB_ID.fullmatch(name) and not any(p.endswith((".", "-")) for p in name.split("/")) \
            and "--" not in name and ".." not in name:
        return
    raise UnknownModelError(
        f"{name!r} is not a registered name, a local model folder or a Hugging Face id of the form 'owner/name' "
        f"(e.g. 'meta-llama/Llama-2-7b-hf'); `python -m sinklib models` lists the registered names."
    )


def local_folder(name: str) -> Path | None:
    """``name`` as a local model folder (what ``save_pretrained`` writes: ``config.json`` beside the weights), None
    when no such folder exists; a folder without ``config.json`` is refused in one line."""
    folder = Path(name).expanduser()
    if not folder.is_dir():
        return None
    if not (folder / "config.json").is_file():
        raise UnknownModelError(f"{name!r} is a folder without config.json; a local model folder is what "
                                f"transformers' save_pretrained writes (config.json, the weights and, for a language "
                                f"model, the tokenizer files)")
    return folder


def resolve_spec(name: str) -> ModelSpec:
    """Registry entry for a short name; an existing folder is a local model (:func:`local_folder`); any other name
    with a '/' is a Hugging Face hub id (:func:`check_hub_id`) whose family is read later."""
    if name in REGISTRY:
        return REGISTRY[name]
    folder = local_folder(name)
    if folder is not None:
        return ModelSpec(name, family="?", source="local", label=folder.resolve().name, description="local folder",
                         offline=True)
    if "/" in name:
        check_hub_id(name)  # timm ids too: "timm/<model>"
        return ModelSpec(name, family="?", source="hub", label=name.split("/")[-1], description="hub id", offline=False)
    raise UnknownModelError(
        f"unknown model {name!r}; registered names: {', '.join(REGISTRY)} "
        "(a Hugging Face id such as 'meta-llama/Llama-2-7b-hf' also works, but needs network or a filled hub cache)."
    )


def require_family(lm: LoadedModel, allowed: str | tuple[str, ...], where: str) -> None:
    """Raise a one-line :class:`WrongFamilyError` unless ``lm.family`` is one of ``allowed``."""
    allowed = (allowed,) if isinstance(allowed, str) else tuple(allowed)
    if lm.family not in allowed:
        fits = [s.name for s in REGISTRY.values() if s.family in allowed and s.source != "config"]
        raise WrongFamilyError(
            f"{where} needs a model of family {'/'.join(allowed)}, but {lm.name!r} is family {lm.family!r}; "
            f"use one of: {', '.join(fits) or 'a hub id of that family'}."
        )


# ----------------------------------------------------------------------------------------------------- builders
def _load_pretrained(path_or_id: str | Path, family: str, dtype: torch.dtype, attn_implementation: str | None,
                     device_map: str | None = None):
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

    kwargs = {"dtype": dtype}
    if device_map:  # weights go from the file to the device(s) directly, never all on the host
        kwargs["device_map"] = device_map
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    cls = AutoModelForCausalLM if family in ("llm", "moe") else AutoModel
    if family == "mllm":
        from transformers import AutoModelForImageTextToText as cls
    if family == "vit" and not Path(str(path_or_id)).exists():
        from transformers import AutoConfig, CLIPVisionModel, SiglipVisionModel

        model_type = AutoConfig.from_pretrained(path_or_id).model_type
        cls = {"clip": CLIPVisionModel, "siglip": SiglipVisionModel}.get(model_type, AutoModel)
    model = cls.from_pretrained(path_or_id, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(path_or_id) if family in ("llm", "moe", "mllm") else None
    return model, tokenizer


def _tiny_llama(seed: int, attn_implementation: str | None):
    from transformers import LlamaConfig, LlamaForCausalLM

    from sinklib.models.bytetok import byte_tokenizer

    tokenizer = byte_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=False,
    )
    config._attn_implementation = attn_implementation or "sdpa"
    torch.manual_seed(seed)
    return LlamaForCausalLM(config), tokenizer


def _tiny_vit(seed: int, attn_implementation: str | None):
    from transformers import Dinov2Config, Dinov2Model

    config = Dinov2Config(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, patch_size=8,
        image_size=64, layerscale_value=1.0,
    )
    config._attn_implementation = attn_implementation or "sdpa"
    torch.manual_seed(seed)
    return Dinov2Model(config), None


CONFIG_BUILDERS = {"tiny-llama-random": _tiny_llama, "tiny-vit-random": _tiny_vit}


def infer_family(config) -> str:
    """Family of a hub model from its config: vision-language, ViT, MoE or dense causal LM."""
    archs = " ".join(getattr(config, "architectures", None) or []).lower()
    if getattr(config, "model_type", "") in ("clip", "siglip", "clip_vision_model", "siglip_vision_model"):
        return "vit"  # a contrastive image-text pair: sinklib reads its vision tower
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if getattr(config, "vision_config", None) is not None and text is not config:
        return "mllm"
    if any(k in archs for k in ("vit", "dinov2", "deit", "beit")) or getattr(config, "model_type", "") in ("vit", "dinov2"):
        return "vit"
    if any(getattr(text, a, None) for a in ("num_local_experts", "num_experts", "n_routed_experts")):
        return "moe"
    return "llm"


def _check_hub_available(model_id: str) -> None:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("1", "true", "True", "YES", "yes"):
        return
    from huggingface_hub import try_to_load_from_cache

    if not isinstance(try_to_load_from_cache(model_id, "config.json"), str):
        raise UnknownModelError(
            f"{model_id!r} is a hub id that is not in the local Hugging Face cache and HF_HUB_OFFLINE=1 is set; "
            f"hub ids need network (e.g. PROFILE=gpu on a machine with hub access) -- offline, use one of: "
            f"{', '.join(n for n, s in REGISTRY.items() if s.offline and s.source != 'config')}."
        )


DEVICE_MAP_ENV = "SINKLIB_DEVICE_MAP"  # "auto" / "balanced": spread every CUDA model over the visible GPUs


def device_map_for(dev: torch.device, device_map: str | None = None) -> str | None:
    """Where ``from_pretrained`` puts the weights: ``None`` on CPU (loaded, then moved as before); on CUDA the device
    itself (weights stream from the file to the GPU, not through host RAM), or accelerate's ``"auto"`` /
    ``"balanced"`` to place the blocks over all visible GPUs -- asked for by ``device_map`` or the
    ``SINKLIB_DEVICE_MAP`` variable, and chosen by itself for a plain ``"cuda"`` when several GPUs are visible
    (``"auto"`` fills cuda:0 first, so a model that fits one GPU stays on it).
    """
    if dev.type != "cuda":
        return None
    chosen = device_map or os.environ.get(DEVICE_MAP_ENV) or None
    if chosen:
        if chosen not in ("auto", "balanced", "balanced_low_0", "sequential") and not chosen.startswith("cuda"):
            raise ValueError(f"device_map={chosen!r}: use 'auto', 'balanced', 'balanced_low_0', 'sequential' or a "
                             "CUDA device such as 'cuda:0'.")
        return chosen
    if dev.index is None and torch.cuda.device_count() > 1:
        return "auto"
    return str(torch.device("cuda", dev.index or 0))


def input_device(model: torch.nn.Module, fallback: torch.device) -> torch.device:
    """Where a model's inputs go: the device of its input embeddings (the first block of a split model)."""
    try:
        return next(model.get_input_embeddings().parameters()).device
    except (AttributeError, NotImplementedError, StopIteration, TypeError):
        return fallback


DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
          "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
          "float64": torch.float64, "fp64": torch.float64, "double": torch.float64}
"""The dtype names (and common aliases) a model can be loaded in: floating point that every layer computes in."""


def dtype_of(dtype: torch.dtype | str) -> torch.dtype:
    """The torch dtype a name or dtype stands for (:data:`DTYPES`: "float32"/"fp32", "bfloat16"/"bf16",
    "float16"/"fp16"/"half", "float64"); anything else -- float8, int8, a typo -- is a one-line
    :class:`~sinklib.core.errors.InputError` listing the accepted names (quantised weights are not loaded this way)."""
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype.lower() in DTYPES:
        return DTYPES[dtype.lower()]
    raise InputError(f"dtype {dtype!r} cannot load a model; use one of {', '.join(DTYPES)} (float8 / int8 weights "
                     f"are not supported: pick bfloat16 or float16 to save memory)")


def default_dtype(device: torch.device) -> torch.dtype:
    """float32 on CPU (Gu et al.'s protocol), bfloat16 on GPU."""
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def load_model(
    name: str,
    device: str | torch.device = "auto",
    dtype: torch.dtype | str | None = None,
    attn_implementation: str | None = "sdpa",
    seed: int = 0,
    device_map: str | None = None,
) -> LoadedModel:
    """Load a registered model (or a hub id) in eval mode, with its tokenizer and shape facts.

    ``attn_implementation`` is the backend for ordinary forwards; :mod:`sinklib.core.capture` switches to an
    attention-probability-recording function for the duration of a ``with`` block regardless of this choice.
    ``seed`` only matters for the randomly initialised test models. On CUDA, transformers models load straight onto
    the GPU(s) (:func:`device_map_for`: one GPU, or accelerate's ``device_map="auto"`` over several); the
    :class:`~sinklib.core.loaded.LoadedModel`'s ``device`` is then where inputs go (the input embeddings' device).
    """
    from sinklib.core.data import check_seed

    check_seed(seed)
    spec = resolve_spec(name)
    dev = resolve_device(device)
    dtype = default_dtype(dev) if dtype is None else dtype_of(dtype)
    placement = device_map_for(dev, device_map)

    if spec.source == "config":
        model, tokenizer = CONFIG_BUILDERS[name](seed, attn_implementation)
        model = model.to(dtype)
    elif spec.source == "gguf":
        model, tokenizer = _load_pretrained(convert_gguf(name), spec.family, dtype, attn_implementation, placement)
    elif spec.source == "upcycled":
        from sinklib.models.upcycle import RECIPES, build_standin

        def build(out: Path) -> None:  # the dense base is loaded here, so upcycle never imports this module
            build_standin(out, load_model(RECIPES[name]["base"], device="cpu", dtype=torch.float32), name=name)

        model, tokenizer = _load_pretrained(build_once(_upcycled_folder(name), build), spec.family, dtype,
                                            attn_implementation, placement)
    elif spec.source == "stitched":
        from sinklib.models.stitch import standin_path

        model, tokenizer = _load_pretrained(standin_path(stitch_config(name)), "mllm", dtype, attn_implementation,
                                            placement)
    elif spec.source == "onnx":
        from sinklib.models.onnx_vit import build_dinov2_small, timm_dinov2_small

        timm_copy = name.endswith("-timm")
        model, tokenizer = _load_pretrained(build_once("dinov2-s", build_dinov2_small), "vit", dtype,
                                            attn_implementation, None if timm_copy else placement)
        if timm_copy:
            model = timm_dinov2_small(model.float()).to(dtype)
    elif name.startswith("timm/"):  # a timm model on the hub, e.g. timm/deit3_large_patch16_224.fb_in22k_ft_in1k
        import timm

        _check_hub_available(name)
        spec = ModelSpec(name, "vit", "hub", name, "timm hub id", offline=False)
        try:  # ViTs: any input size (position embeddings interpolated), as the notebooks' image sizes vary
            model = timm.create_model(f"hf-hub:{name}", pretrained=True, dynamic_img_size=True)
        except TypeError:  # an architecture without that option
            model = timm.create_model(f"hf-hub:{name}", pretrained=True)
        model, tokenizer = model.to(dtype), None
    else:
        if spec.source != "local":
            _check_hub_available(name)
        from transformers import AutoConfig

        try:
            config = AutoConfig.from_pretrained(name)
        except (OSError, ValueError) as err:  # ValueError: a config.json transformers cannot read
            if spec.source == "local":
                raise UnknownModelError(f"{name!r}: its config.json cannot be read ({str(err).splitlines()[0]}); "
                                        f"save the model again with save_pretrained") from None
            from sinklib.models.hub_access import hub_error_line

            raise UnknownModelError(hub_error_line(name, err) + ".") from None
        spec = ModelSpec(name, infer_family(config), spec.source, spec.label, spec.description, offline=spec.offline)
        model, tokenizer = _load_pretrained(name, spec.family, dtype, attn_implementation, placement)

    if getattr(model, "hf_device_map", None) is None and not _placed(model, placement):
        model = model.to(dev)
    model = model.eval()
    dev = input_device(model, dev)
    if not hasattr(model, "config"):  # timm: no transformers config
        from types import SimpleNamespace

        attn = model.blocks[0].attn
        cfg = SimpleNamespace(num_hidden_layers=len(model.blocks), num_attention_heads=attn.num_heads,
                              hidden_size=model.embed_dim, head_dim=attn.head_dim)
    else:
        cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    n_heads = cfg.num_attention_heads
    adds_bos = False
    if tokenizer is not None:
        probe = tokenizer("a").input_ids
        adds_bos = bool(tokenizer.bos_token_id is not None and probe and probe[0] == tokenizer.bos_token_id)
    return LoadedModel(
        name=name, spec=spec, model=model, tokenizer=tokenizer, device=dev, dtype=dtype,
        n_layers=cfg.num_hidden_layers, n_heads=n_heads,
        n_kv_heads=getattr(cfg, "num_key_value_heads", None) or n_heads,
        hidden_size=cfg.hidden_size, head_dim=getattr(cfg, "head_dim", None) or cfg.hidden_size // n_heads,
        vocab_size=getattr(cfg, "vocab_size", None), adds_bos=adds_bos,
        pixel_norm=pixel_norm(name, model) if spec.family == "vit" else None,
    )


def pixel_norm(name: str, model: torch.nn.Module) -> tuple:
    """(mean, std) per RGB channel a ViT was trained with: timm's ``pretrained_cfg``, else the ``image_mean`` /
    ``image_std`` of the hub repository's image processor (CLIP: (0.481, 0.458, 0.408) / (0.269, 0.261, 0.276)),
    else ImageNet's (the offline DINOv2-S, trained on ImageNet statistics)."""
    from sinklib.core.images import IMAGENET

    cfg = getattr(model, "pretrained_cfg", None)
    if cfg and cfg.get("mean") and cfg.get("std"):
        return tuple(cfg["mean"]), tuple(cfg["std"])
    if name in REGISTRY and REGISTRY[name].offline:
        return IMAGENET
    from transformers import AutoImageProcessor

    try:
        proc = AutoImageProcessor.from_pretrained(name)
    except (OSError, ValueError) as err:
        raise UnknownModelError(f"{name!r}: no image processor to read its pixel mean and std from "
                                f"({str(err).splitlines()[0]}); add a preprocessor_config.json to the model.") from None
    return tuple(proc.image_mean), tuple(proc.image_std)


def _placed(model: torch.nn.Module, placement: str | None) -> bool:
    """True when ``from_pretrained`` already put every parameter on the device ``placement`` names."""
    if not placement or not placement.startswith("cuda"):
        return False
    want = torch.device(placement)
    return all(p.device == want for p in model.parameters())


STITCH_OVERRIDES = {"llava-standin": {},  # registry name -> StitchConfig fields
                    # the smoke twin checks the plumbing: 4 steps of 16 pairs need no 1,416 encoded images (47 s)
                    "llava-standin-smoke": {"steps": 4, "digits": 200, "photo_crops": 4}}


def stitch_config(name: str):
    """The :class:`sinklib.models.stitch.StitchConfig` a registry stand-in is built with."""
    from sinklib.models.stitch import StitchConfig

    return StitchConfig(**STITCH_OVERRIDES[name])


def _upcycled_folder(name: str) -> str:
    """The upcycled registry stand-in ``name``'s cache folder: versioned, so a stand-in built by older code is never
    read as this one."""
    from sinklib.models.upcycle import RECIPES, standin_name

    return standin_name(RECIPES[name]["seed"], name)


def list_models() -> list[dict]:
    """Rows for ``python -m sinklib models``: name, family, source, offline flag, installed flag, description."""
    rows = []
    for spec in REGISTRY.values():
        installed = spec.package is None or importlib.util.find_spec(spec.package) is not None
        folder = ("dinov2-s" if spec.source == "onnx" else
                  "llava-standin-" + stitch_config(spec.name).key() if spec.source == "stitched" else
                  _upcycled_folder(spec.name) if spec.source == "upcycled" else spec.name)
        cached = spec.source not in ("gguf", "upcycled", "onnx", "stitched") or converted_path(folder).exists()
        rows.append({
            "name": spec.name, "family": spec.family, "source": spec.source, "label": spec.label,
            "installed": installed, "converted": cached, "description": spec.description,
        })
    return rows
