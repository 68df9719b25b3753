"""A CPU stand-in for NDIF's ModelActor, plugged in through ndif's own actor-class setting
(NDIF_MODEL_IMPORT_PATH / `ndif deploy --actor-class`). ndif 0.1.2's ModelActor calls
torch.cuda.set_device / synchronize / get_device_properties and refuses any weight on the CPU
(verify_device_placement), so these four methods are replaced; request execution is ndif's own."""
import gc

import ray
from ndif.services.ray.deployments.modeling.base import BaseModelDeployment
from nnsight.modeling.huggingface import HuggingFaceModel


class _CPUModel(BaseModelDeployment):
    def load_from_disk(self) -> HuggingFaceModel:
        self.gpu_mem_bytes_by_id = {}  # no CUDA calls anywhere below (gpu_baselines/peaks loop over it)
        model = HuggingFaceModel.from_model_key(self.model_key, dispatch=True, dtype=self.dtype_name,
                                                device_map="cpu", **self.kwargs)
        model._module.requires_grad_(False)
        return model

    async def to_cache(self) -> None:
        self.cached = True

    def from_cache(self, gpu_mem_bytes_by_id) -> None:
        self.gpu_mem_bytes_by_id = {}
        self.cached = False

    def cleanup(self) -> None:
        self.kill_switch.clear()
        self.kill_reason = None
        self.execution_ident = None
        self.model.interleaver.cancel()
        gc.collect()


# ndif wraps its class the same way (base.py: @ray.remote(num_cpus=1, max_restarts=-1) class ModelActor);
# Ray refuses to subclass an actor class, so the CPU version subclasses the plain base and is wrapped here.
CPUModelActor = ray.remote(num_cpus=1, max_restarts=-1)(_CPUModel)
