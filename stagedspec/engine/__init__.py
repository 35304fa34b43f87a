"""The decoding engine: sampling, tree shapes and draft trees, the acceptance rule, the
drafter protocol, the kernel plan and lean layers, the model's final logit processing,
the batched KV cache and the decoding loop. It imports only ``metrics`` (where it records
its rounds); it never loads a model or reads a config."""
