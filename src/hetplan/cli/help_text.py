"""Help texts that several commands' option signatures share.

Typer reads option help when the commands are registered, that is on every ``hetplan`` start;
this module imports nothing, so ``hetplan --help`` does not load torch to show it.
"""

DTYPE_HELP = (
    "Training precision: fp32, or bf16/fp16 mixed precision: autocast over fp32 master "
    "weights (fp16 adds a loss scaler)."
)
"""Help text of the ``--dtype`` option of ``hetplan plan``, ``predict`` and ``tune``."""
