"""``Trainer(cuda_graph=True)``: the whole training step captured once as a CUDA graph and replayed.

Imported only when the flag is set (``import trainer`` stays cheap). The parts:

- ``checks``: the refusals, at ``Trainer(...)`` (no CUDA, several devices, 16-mixed, ...) and at fit
  set-up (manual optimization, an overridden ``optimizer_step``, an optimizer that cannot be captured).
- ``backend``: the seam between the bookkeeping and the device: ``GraphBackend`` (warm up, capture,
  replay, watch for host reads) with ``cuda.CudaGraphs`` as its CUDA implementation; tests use a CPU fake.
- ``optimizers``: ``capturable`` turned on, each group's learning rate as a device tensor, checkpoints
  written with the optimizer's own settings.
- ``inputs``: a batch's signature (the cache key) and its static device copy.
- ``tape``: what a captured step logs (``self.log``, the non-finite record), recorded at capture and
  re-logged after each replay.
- ``captured``: ``CapturedStep``, the per-batch decision (warm up, capture, replay, run eagerly), the
  bounded cache, and the fit-end ``summary``.

See docs/cuda-graphs.md for the rules a captured step follows.
"""
