"""kvqa's own C kernels (int8 products, decode attention), built on first use."""
