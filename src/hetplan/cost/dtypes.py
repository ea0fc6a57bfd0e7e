"""Training dtypes: re-exported from :mod:`hetplan.planspec.dtypes`, the one dtype table."""

from hetplan.planspec.dtypes import DTYPE_BYTES, MIXED_PRECISION_DTYPES, is_mixed_precision

__all__ = ["DTYPE_BYTES", "MIXED_PRECISION_DTYPES", "is_mixed_precision"]
