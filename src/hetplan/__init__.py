"""hetplan: plan and run distributed training of PyTorch models on heterogeneous devices."""

__version__ = "0.1.0"
