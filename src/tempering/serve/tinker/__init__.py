"""A local service for the Tinker API: the `tinker` SDK's `ServiceClient`, `TrainingClient` and
`SamplingClient`, and tinker-cookbook's loops on them, run against tempering's models, its policy-loss
registry and its sampler, in one process (CPU by default, CUDA when present).

- `config.py`: the settings (`tempering config serve`), importing nothing heavy;
- `wire.py`: the SDK's wire format (its own types and protobuf messages) to and from plain tensors;
- `losses.py`: Tinker's loss names on tempering's registered losses;
- `models.py`: training models (LoRA or full), their forward/backward, Adam steps, snapshots and
  checkpoints;
- `engine.py`: the one thread that runs every request, in each model's order, and the futures;
- `app.py`: the HTTP routes (FastAPI), the SDK's error format and the request limits.
"""
