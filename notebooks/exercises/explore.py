# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: -all
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # The attention explorer
#
# Pick a layer and a head with the sliders: (a) the attention map, (b) alpha per key -- the first token's bar is
# alpha_0 -- and (c) the hidden-state norm of every token after that layer. Predict, then run: in which layers does
# the first token's bar dominate, and does its hidden-state norm stand out in the same layers?

# %%
import sinklib
from sinklib.models.load import load_model

lm = load_model("smollm2-135m", device="cpu")
explorer = sinklib.explore(lm, "In the beginning God created the heavens and the earth. The earth was formless.")

# %% [markdown]
# For a ViT, pass one image: `sinklib.explore(load_model("dinov2-s"), images.to_pixels([images.photos()[0].image]))`
# shows the CLS query's attention, alpha and the norms as patch grids over the image.
