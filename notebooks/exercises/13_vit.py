# %% [markdown]
# # Exercises for 13 · ViT -- high-norm patches and a register made at test time
#
# **What you will practise.** Finding a ViT's high-norm patch tokens, scoring Jiang et al.'s *register neurons*
# (*Vision Transformers Don't Need Trained Registers*, arXiv 2506.08010) and writing the edit that moves their
# activation from the image's patches onto an extra token -- a register added without training -- then running your
# edit inside DINOv2-S.
# **Prerequisites:** `13_vit` sections 3 and 5; what an MLP neuron's activation is. **Time:** about 40 minutes; the
# last cells load DINOv2-S from the offline cache and run it on the bundled photos (under a minute on a CPU).
#
# Each check runs your function on hand-worked cases (`help(check.move_to_registers)`) and against sinklib's code.
#
# > Generated from `solutions/13_vit.py` by `python -m sinklib exercises`: edit the solution file, then regenerate.


# %%
import torch

from sinklib.teaching import check

# %% [markdown]
# ## Task 1 · high-norm patches
# Darcet et al. (*Vision Transformers Need Registers*, arXiv 2309.16588) found patch tokens whose hidden state is far
# longer than the rest. This project's cut: $\lVert h_t \rVert > c \cdot \mathrm{median}_{t'} \lVert h_{t'} \rVert$
# over the same image's patches. `patch_norms` is (B, P); return a (B, P) bool mask. Use `torch.median` (for an even
# number of patches it takes the lower of the two middle values).

# %%
def outlier_mask(patch_norms: torch.Tensor, factor: float) -> torch.Tensor:
    raise NotImplementedError  # your code here


check.outlier_mask(outlier_mask)

# %% [markdown]
# ## Task 2 · register neurons
# Which MLP neurons write the outliers? Jiang et al. score neuron $n$ of a layer by its mean $|a_{t,n}|$ at the
# outlier positions of each image, averaged over the images that have outliers:
# $s_n = \frac{1}{|I|}\sum_{b \in I} \frac{1}{|O_b|}\sum_{t \in O_b} |a_{b,t,n}|$. `acts` (B, T, F) are one layer's
# MLP activations (the input of its output projection), `positions` (B, T) the outlier tokens. Return (F,).

# %%
def register_scores(acts: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    raise NotImplementedError  # your code here


check.register_scores(register_scores)

# %% [markdown]
# ## Task 3 · move the activation onto a register
# Append an extra token to the image (it starts at zeros); per image, take the one activation of largest magnitude,
# with its sign, over all tokens and all the layer's register neurons (Jiang et al.'s `sign_max`: one value for the
# layer, not one per neuron); give the extra tokens (the last `n_registers`) that value in every register neuron and
# every other token but CLS (token 0) 0 there. The outlier then has nowhere to form but on the extra token, which the
# model treats as a register. `acts` (B, T, F); leave CLS, the other neurons and the tensor you are given unchanged.

# %%
def move_to_registers(acts: torch.Tensor, neurons: list[int], n_registers: int) -> torch.Tensor:
    raise NotImplementedError  # your code here


check.move_to_registers(move_to_registers)

# %% [markdown]
# ## Try it on a real model
# DINOv2-S on the bundled photos: your Task 1 at the second-to-last layer; your Task 2 on every layer's MLP
# activations; the top 5 (layer, neuron) pairs; then your Task 3 inside the model (sinklib's `TestTimeRegisters`
# appends the token and calls your function in those MLPs). Predict, then run: does this small model have outliers
# at all (`13_vit` section 3)? If not, each photo's highest-norm patch stands in -- what should the register change
# then?

# %%
from sinklib.architectures.vit.registers import TestTimeRegisters, neurons_by_layer, top_neurons  # noqa: E402
from sinklib.architectures.vit.vit_sinks import profile_vit, vit_forward  # noqa: E402
from sinklib.core import images  # noqa: E402
from sinklib.core.capture import Capture  # noqa: E402
from sinklib.models.load import load_model  # noqa: E402

lm = load_model("dinov2-s", device="cpu")
pixels = images.to_pixels([p.image for p in images.photos()], size=224)
before = profile_vit(lm, pixels)
norms = before.patch_norms()[-2]  # (B, P) at the second-to-last layer
mask = outlier_mask(norms, 3.0)
print(f"outliers (norm > 3 x median) per photo: {mask.sum(-1).tolist()}")
if not mask.any():  # no outliers in this model: each photo's highest-norm patch stands in, as in 13_vit
    mask = torch.zeros_like(norms, dtype=torch.bool)
    mask[torch.arange(len(norms)), norms.argmax(-1)] = True
positions = torch.zeros(len(norms), before.n_tokens, dtype=torch.bool)
positions[:, before.n_prefix:before.n_prefix + norms.shape[1]] = mask

with torch.no_grad(), Capture(lm.model, mlp_activations=True) as cap:
    vit_forward(lm, pixels)
scores = torch.stack([register_scores(a.float(), positions) for a in cap.stack("mlp_activations")])  # (L, F)
found = top_neurons(scores, 5)
print("register neurons (layer, neuron, score):", [(a, b, round(c, 2)) for a, b, c in found])

after = profile_vit(lm, pixels, extra=TestTimeRegisters(lm.model, neurons_by_layer(found), move=move_to_registers))
print(f"largest / median patch norm, last layer: {before.max_norm_ratio()[-1]:.2f} before, "
      f"{after.max_norm_ratio()[-1]:.2f} with the register; the register's norm / median patch norm: "
      f"{float((after.norms[-1, :, -1] / after.patch_norms()[-1].median(-1).values).mean()):.2f}")

# %% [markdown]
# ## Questions to try
# 1. Lower the cut in Task 1 to 2: which photos get outliers, and are they background patches (`13_vit` section 4)?
# 2. Use `n_registers=2` in `TestTimeRegisters`: do both extra tokens end up alike?
# 3. Compare your register neurons' layers with where `13_vit`'s high-norm tokens appear. In a large model with real
#    outliers (the GPU profile's DINOv2-L/g), what would the register's norm be against the cut?
