"""The use cases behind the commands: typed inputs in, a typed result out, nothing printed.

One module per flow: :mod:`~hetplan.usecases.plan` (search, write the winner),
:mod:`~hetplan.usecases.predict` (one plan's prediction), :mod:`~hetplan.usecases.train` (run,
measure, compare, write back) and :mod:`~hetplan.usecases.tune` (trials of the top plans). The
CLI parses arguments, calls one flow and prints its result; a flow tells its caller how it goes
through :class:`~hetplan.usecases.feedback.Feedback` (spinners and progress lines are the CLI's).
"""
