"""One nnsight remote request against a local NDIF server (scripts/ndif_local.sh cpu), then the workbench's
NNsightModel with remote=True. Usage: NDIF_HOST=http://127.0.0.1:8001 python scripts/ndif_local_request.py DIR"""
import os
import sys
import time

import nnsight.modeling.huggingface as nns_hf
import torch
from nnsight import CONFIG, LanguageModel

path = sys.argv[1]
CONFIG.API.HOST = os.environ.get("NDIF_HOST", "http://127.0.0.1:8001")
# nnsight's model key canonicalises the repo id through the Hub (HfApi().model_info); a local folder has
# no Hub entry and this machine has no Hub, so the key's id is seeded with the folder path, as deployed.
nns_hf._ID_CACHE[path] = path

lm = LanguageModel(path, tokenizer=path)
ids = lm.tokenizer("The capital of France is", return_tensors="pt")["input_ids"]
with lm.trace(ids):
    local = lm.output.logits.save()
t0 = time.perf_counter()
with lm.trace(ids, remote=True):
    remote = lm.output.logits.save()
print(f"plain remote trace: {time.perf_counter() - t0:.2f}s, max|remote-local| "
      f"{(remote - local).abs().max().item():.3e}, scale {local.abs().max().item():.3e}")
with lm.trace(ids, remote=True):
    h = lm.model.layers[3].output[0] if isinstance(lm.model.layers[3].output, tuple) else lm.model.layers[3].output
    h.requires_grad_(True)
    g = h.save()
    with lm.output.logits[0, -1].max().backward():
        grad = h.grad.save()
print("remote backward: grad norm", float(torch.as_tensor(grad).norm()))
# A dict made before the trace and filled inside it (the workbench's _trace/_rope_tables/traced_grads do this):
# locally the saves land in it; through a server only names saved in the trace's frame come back.
for remote in (False, True):
    box: dict = {}
    with lm.trace(ids, remote=remote):
        box["logits"] = lm.output.logits.save()
    print(f"dict filled inside a trace, remote={remote}: keys after it {list(box)}")

# -- the workbench's remote path: NNsightModel(remote=True) over the served folder, against TransformerLens
from transformers import AutoTokenizer  # noqa: E402

import workbench as wb  # noqa: E402
from core.models.remote import NNsightModel  # noqa: E402

tl = wb.load("smollm2-135m")  # TransformerLens backend, local: the reference numbers
rm = NNsightModel(path, tokenizer=AutoTokenizer.from_pretrained(path), name="smollm2-135m", remote=True,
                  prepend_bos=tl.prepend_bos)
prompt, target = "When Mary and John went to the store, John gave a drink to", " Mary"
print("load average", os.getloadavg())
for method, level in [("dpa", "token"), ("dpa", "head"), ("gradient", "token"), ("input_x_gradient", "token"),
                      ("integrated_gradients", "token")]:
    ref = wb.attribute(tl, prompt, target, method=method, level=level).scores.float()
    t0 = time.perf_counter()
    try:
        got = wb.attribute(rm, prompt, target, method=method, level=level).scores.float()
    except Exception as exc:  # report the exact line, go on with the next method
        print(f"{method}/{level}: remote FAILED: {type(exc).__name__}: {str(exc).splitlines()[0]}")
        continue
    dt = time.perf_counter() - t0
    scale = ref.abs().max().item()
    diff = (got - ref).abs().max().item()
    print(f"{method}/{level}: remote {dt:.2f}s, shape {tuple(got.shape)}, max|remote-TL| {diff:.3e}, "
          f"scale {scale:.3e}, relative {diff / scale:.2e}")
print("load average", os.getloadavg())
