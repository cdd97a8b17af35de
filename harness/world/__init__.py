"""What a run measures with: a GPU (real or twin), a sampler, a launcher and the world's clock; its health; the synthetic workload of one cell (the bench)."""
