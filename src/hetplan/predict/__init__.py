"""Predict one explicit plan: the façade over pricing, scheduling and simulation."""

from hetplan.predict.build import DATASET_SIZES, plan_from_options
from hetplan.predict.predict import DevicePrediction, Prediction, predict

__all__ = [
    "DATASET_SIZES",
    "DevicePrediction",
    "Prediction",
    "plan_from_options",
    "predict",
]
