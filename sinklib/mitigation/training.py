"""Train :class:`~sinklib.mitigation.variant_lm.TinyLM` with one attention variant and watch its sink, cached by
configuration.

The data (``TrainConfig.data``: Bible bytes, bigram-backcopy or a text file) is drawn by
:mod:`sinklib.mitigation.training_data`. Every ``eval_every`` steps a checkpoint records train/validation loss and
the sink and outlier statistics of a fixed validation batch (:func:`sinklib.mitigation.evaluation.evaluate`). A
finished run is stored under ``<cache>/training/`` as JSON (metrics) and ``.pt`` (final weights), keyed by a hash of
its full configuration, so unchanged runs are never repeated; a manifest of the two
(:mod:`sinklib.core.manifest`) is written last, and a run whose files are missing or do not match it is incomplete
and trains again (:func:`run_problem`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from sinklib.core import manifest, precision
from sinklib.core.errors import InputError
from sinklib.core.paths import cache_dir
from sinklib.core.results import write_json
from sinklib.mitigation.evaluation import evaluate
from sinklib.mitigation.training_data import BOS, make_batch
from sinklib.mitigation.variant_lm import TinyConfig, TinyLM

# 3: no weight decay on 1-D parameters, row-normalised first-token share; bump when the loop or the metrics change,
# to invalidate cached runs
TRAINING_VERSION = 3


@dataclass(frozen=True)
class TrainConfig:
    model: TinyConfig = field(default_factory=TinyConfig)
    steps: int = 400
    batch_size: int = 16
    seq_len: int = 128  # including the BOS token
    lr: float = 3e-3
    warmup: int = 40
    weight_decay: float = 0.1
    eval_every: int = 50
    eval_seqs: int = 32
    seed: int = 0
    bos: bool = True
    data: str = "bible"  # "bible" (real text, bytes), "bigram_backcopy" (synthetic) or "file:<path>" (text file)
    precision: str = "float32"  # "float32", or "bf16": bfloat16 autocast for the forward (weights and AdamW in float32)
    micro_batch: int = 0  # > 0: the batch in parts of this size, gradients accumulated (same update, less memory)

    def key(self) -> str:
        fields = asdict(self)
        if self.precision == "float32":  # the key runs had before the field existed
            del fields["precision"]
        del fields["micro_batch"]  # the same update however the batch is split
        if not self.model.options:  # no variant options: the key runs had before the field existed
            del fields["model"]["options"]
        if not self.model.n_experts:  # a dense FFN: the key runs had before the MoE fields existed
            for name in ("n_experts", "top_k", "balance"):
                del fields["model"][name]
        blob = json.dumps({"v": TRAINING_VERSION, **fields}, sort_keys=True)
        return f"{self.model.attention}-s{self.seed}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"



SHARE_LIMIT = 2**25  # token ids: runs with at most this many training tokens share their drawn batches (int16, 64 MB)


@lru_cache(maxsize=4)
def training_batches(cfg: TrainConfig) -> torch.Tensor:
    """Every training batch of a run, in order: (steps, batch_size, seq_len) int16 ids drawn by :func:`make_batch`
    from one generator seeded with ``cfg.seed`` -- exactly the batches the loop draws one step at a time otherwise.

    They depend only on the data, the seed and the batch shape, not on the attention variant, so the variants of one
    seed share them: drawn once (bigram-backcopy samples token by token: ~9 ms a step on one CPU thread), reused by
    each variant. Only for runs of at most :data:`SHARE_LIMIT` tokens (the GPU profile's draws step by step).
    """
    gen = torch.Generator().manual_seed(cfg.seed)
    return torch.stack([make_batch(cfg, "train", cfg.batch_size, gen).to(torch.int16) for _ in range(cfg.steps)])


def _batch_key(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with everything the training batches do not depend on set to defaults (the cache key of
    :func:`training_batches`)."""
    return TrainConfig(model=TinyConfig(), steps=cfg.steps, batch_size=cfg.batch_size, seq_len=cfg.seq_len,
                       seed=cfg.seed, bos=cfg.bos, data=cfg.data)



def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups in the standard split (minGPT / nanoGPT / Llama recipes): weight decay on weight matrices only.

    Decayed: the weights of ``nn.Linear`` and ``nn.Embedding`` modules (``ndim == 2`` maps). Not decayed: everything
    else -- norm gains, biases, the sigmoid bias, the sink logits, and the KV-bias vectors k', v' (stored as one
    (heads, head_dim) tensor, so ``ndim`` alone would miss them). Decaying those would pull the mitigations' own
    parameters toward zero, i.e. toward the baseline.
    """
    matrices = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Linear | torch.nn.Embedding)}
    matrices |= {id(p) for name, p in model.named_parameters() if name.rsplit(".", 1)[-1].startswith("experts_")}
    decay = [p for p in model.parameters() if p.requires_grad and id(p) in matrices]
    keep = [p for p in model.parameters() if p.requires_grad and id(p) not in matrices]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": keep, "weight_decay": 0.0}]


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * frac)))


def run_paths(cfg: TrainConfig) -> tuple[Path, Path]:
    """Where a run's metrics (JSON) and final weights (.pt) are cached."""
    base = cache_dir() / "training" / cfg.key()
    return base.with_suffix(".json"), base.with_suffix(".pt")


_RUN_RECIPE = f"training-v{TRAINING_VERSION}"  # what a run's manifest records as its recipe


def run_manifest(cfg: TrainConfig) -> Path:
    """The run's manifest (:mod:`sinklib.core.manifest`), written after its JSON and ``.pt``: without it, or when the
    two files do not match it, the run is incomplete."""
    return manifest.beside(cache_dir() / "training" / cfg.key())


def run_problem(cfg: TrainConfig) -> str | None:
    """None when the cached run of ``cfg`` is complete -- its JSON and ``.pt`` match its manifest (sizes; sha256 of
    a file with a new mtime) -- else what is missing or differs, naming the file."""
    json_path, weights_path = run_paths(cfg)
    record = run_manifest(cfg)
    if not record.exists():
        missing = [str(p) for p in (json_path, weights_path, record) if not p.exists()]
        return f"{' and '.join(missing)} {'are' if len(missing) > 1 else 'is'} missing"
    return manifest.problem(record, json_path.parent, [json_path.name, weights_path.name], _RUN_RECIPE, refresh=True)


def _record_run(cfg: TrainConfig) -> None:
    json_path, weights_path = run_paths(cfg)
    manifest.write(run_manifest(cfg), json_path.parent, [json_path.name, weights_path.name], _RUN_RECIPE)


def _save_run(cfg: TrainConfig, result: dict, state: dict[str, torch.Tensor]) -> None:
    """Write a finished run: its manifest removed first, then the ``.pt`` and the JSON (each atomically), then its
    manifest last -- a run interrupted in between is incomplete and trains again."""
    json_path, weights_path = run_paths(cfg)
    weights_path.parent.mkdir(parents=True, exist_ok=True)
    run_manifest(cfg).unlink(missing_ok=True)
    torch.save(state, weights_path.with_suffix(".pt.tmp"))
    weights_path.with_suffix(".pt.tmp").replace(weights_path)
    write_json(json_path, result)
    _record_run(cfg)


def check_config(cfg: TrainConfig) -> None:
    """One-line errors for settings that cannot train."""
    if cfg.seq_len > cfg.model.max_len:
        raise InputError(f"seq_len {cfg.seq_len} exceeds the model's max_len {cfg.model.max_len}; raise max_len")
    if cfg.model.vocab_size <= BOS:
        raise InputError(f"vocab_size {cfg.model.vocab_size} has no BOS id {BOS}; use at least {BOS + 1}")
    if cfg.steps < 1 or cfg.eval_every < 1:
        raise InputError(f"steps ({cfg.steps}) and eval_every ({cfg.eval_every}) must be positive")


def autocast(cfg: TrainConfig, device: str | torch.device) -> torch.autocast:
    """The forward's precision (:func:`sinklib.core.precision.autocast` of ``cfg.precision``): float32 throughout,
    or ``"bf16"``: matmuls in bfloat16 (softmax, norms, the loss, weights, gradients and AdamW stay float32)."""
    return precision.autocast(cfg.precision, device)


def training_step_bytes(cfg: TrainConfig, batch: int | None = None) -> dict[str, int]:
    """Bytes one training step of ``cfg`` holds at its peak, counted on the meta device (nothing is allocated).

    ``state``: parameters, gradients and AdamW's two moments, 16 bytes per float32 parameter. ``saved``: every
    tensor autograd keeps for backward (``torch.autograd.graph.saved_tensors_hooks`` during one forward and the
    loss), counted once per storage and without the parameters; this is what differs between attention variants
    (softpick keeps several (B, H, T, T) tensors, softmax one). ``logits_grad``: the (B, T, V) float32 gradient of
    the logits, alive at the start of backward. Peak ~= state + saved + logits_grad (transient buffers aside).
    The forward is counted in float32 whatever ``cfg.precision`` (autocast does not act on meta tensors): under
    bf16 autocast the saved matmul inputs halve while softmax outputs stay float32 and gain a bfloat16 copy for the
    next matmul, so for ``"bf16"`` the count is an estimate, not a bound."""

    B, T = batch or cfg.batch_size, cfg.seq_len
    with torch.device("meta"):
        model = TinyLM(cfg.model)
    params = {p.untyped_storage()._cdata for p in model.parameters()}
    n_params = sum(p.numel() for p in model.parameters())
    saved: dict[int, tuple[torch.Tensor, int]] = {}  # storage -> (a tensor keeping it alive, bytes)

    def pack(t: torch.Tensor) -> torch.Tensor:
        store = t.untyped_storage()
        if store._cdata not in params:
            saved.setdefault(store._cdata, (t, store.nbytes()))
        return t

    ids = torch.zeros(B, T, dtype=torch.long, device="meta")
    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast(cfg, "cpu"):
        logits = model(ids)  # (B, T, V)
        F.cross_entropy(logits[:, :-1].float().flatten(0, 1), ids[:, 1:].flatten())
    return {"parameters": n_params, "state": 16 * n_params, "saved": sum(n for _, n in saved.values()),
            "logits_grad": 4 * logits.numel()}


@torch.enable_grad()  # also where the caller measures with autograd off (a notebook's default)
def train(cfg: TrainConfig, use_cache: bool = True, progress: bool = True, device: str = "cpu") -> dict:
    """Train one run (or read it from the cache); returns {"config", "key", "checkpoints": [...], "seconds"}.

    Each checkpoint holds the step, the seconds of training so far, the mean training loss since the previous
    checkpoint and :func:`evaluate`'s statistics. The final weights are cached too (:func:`load_trained`).
    """
    check_config(cfg)
    if use_cache:
        cached = _cached_run(cfg)
        if cached is not None:
            return cached
    with precision.training_threads(device):  # one thread on a CPU, whatever the notebook has: see precision
        return _train(cfg, use_cache, progress, device)


def _cached_run(cfg: TrainConfig) -> dict | None:
    """The complete cached run of ``cfg`` (:func:`run_problem`), or None -- with a one-line note naming the file when
    an incomplete or corrupted one is there (it is then trained again and overwritten)."""
    problem = run_problem(cfg)
    if problem is None:
        json_path, _ = run_paths(cfg)
        try:
            return json.loads(json_path.read_text())
        except (OSError, ValueError) as err:  # changed between the check and the read
            problem = f"{json_path} cannot be read ({manifest.first_line(err)})"
    if any(p.exists() for p in (*run_paths(cfg), run_manifest(cfg))):
        manifest.note(f"{problem}; training the run {cfg.key()} again")
    return None


def _train(cfg: TrainConfig, use_cache: bool, progress: bool, device: str) -> dict:
    """:func:`train`'s loop (the cache is checked, the threads fixed)."""
    torch.manual_seed(cfg.seed)
    model = TinyLM(cfg.model).to(device)
    opt = torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(cfg.seed)
    shared = cfg.steps * cfg.batch_size * cfg.seq_len <= SHARE_LIMIT
    batches = training_batches(_batch_key(cfg)) if shared else None  # (steps, B, T), shared by this seed's variants
    val = make_batch(cfg, "heldout", cfg.eval_seqs, torch.Generator().manual_seed(1234)).to(device)
    checkpoints, losses, trained = [], [], 0.0
    bar = tqdm(range(cfg.steps + 1), desc=f"{cfg.model.attention} seed {cfg.seed}", disable=not progress, leave=False)
    for step in bar:
        if step % cfg.eval_every == 0 or step == cfg.steps:
            row = {"step": step, "seconds": trained, "train_loss": sum(losses) / len(losses) if losses else None,
                   **evaluate(model, val)}
            checkpoints.append(row)
            losses = []
            bar.set_postfix(val=f"{row['val_loss']:.3f}", alpha=f"{row['first_attention']:.2f}")
        if step == cfg.steps:
            break
        start = time.perf_counter()
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        batch = (batches[step].long() if shared else make_batch(cfg, "train", cfg.batch_size, gen)).to(device)
        opt.zero_grad(set_to_none=True)
        loss = torch.zeros((), device=device)
        for part in batch.split(cfg.micro_batch or len(batch)):  # (b, T) parts; one part unless micro_batch
            with autocast(cfg, device):
                logits = model(part)  # (b, T, V)
            part_loss = F.cross_entropy(logits[:, :-1].float().flatten(0, 1), part[:, 1:].flatten())
            if cfg.model.n_experts:  # the router learns with the model, load-balanced as Mixtral's
                part_loss = part_loss + model.balance_loss()
            (part_loss * (len(part) / len(batch))).backward()
            loss = loss + part_loss.detach() * (len(part) / len(batch))
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        trained += time.perf_counter() - start
    if not math.isfinite(checkpoints[-1]["val_loss"]):
        raise FloatingPointError(f"{cfg.key()}: validation loss became {checkpoints[-1]['val_loss']}; lower lr")
    result = {"config": asdict(cfg), "key": cfg.key(), "checkpoints": checkpoints, "seconds": trained}
    if use_cache:
        _save_run(cfg, result, {k: v.detach().cpu() for k, v in model.state_dict().items()})
    return result



def load_trained(cfg: TrainConfig, device: str = "cpu") -> TinyLM:
    """The final model of a complete cached run (train it first with :func:`train`); a one-line
    :class:`InputError` naming the file when the run is missing, incomplete or corrupted (:func:`run_problem`) --
    ``train(cfg)`` then trains it again."""
    _, weights_path = run_paths(cfg)
    problem = run_problem(cfg)
    if problem is None:
        try:
            state = torch.load(weights_path, map_location="cpu", weights_only=True)  # then moved: a fake device too
        except Exception as err:  # torch raises several kinds (RuntimeError, UnpicklingError, EOFError) for one fault
            problem = f"{weights_path} cannot be read ({manifest.first_line(err)})"
        else:  # a NaN weight is a fault, never a value a figure reports
            bad = next((k for k, v in state.items() if v.is_floating_point() and not torch.isfinite(v).all()), None)
            if bad is not None:  # the run counts as incomplete from now on: the next train(cfg) trains it again
                problem = f"{weights_path} holds non-finite weights ({bad})"
                with contextlib.suppress(OSError):  # a read-only cache: the error still says what is wrong
                    run_manifest(cfg).unlink(missing_ok=True)
    if problem is not None:
        raise InputError(f"no cached weights for {cfg.key()}: {problem}; run sinklib.mitigation.training.train(cfg) "
                         f"first (it trains a missing or incomplete run again)")
    model = TinyLM(cfg.model)
    model.load_state_dict(state)
    return model.to(device).eval()
