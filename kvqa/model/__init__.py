"""The model: loading it, its weights and KV cache, the written-out steps; kernels/ beneath."""
