# -- Training flags -------------------------------------------------------------------------------
class OneLineErrorParser(argparse.ArgumentParser):
    """Bad input ends with one line that names the problem, and exit code 2."""

    def __init__(self, **options):
        super().__init__(formatter_class=argparse.ArgumentDefaultsHelpFormatter, **options)

    def error(self, message):
        printable = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
        self.exit(2, "%s: error: %s (see --help)\n" % (self.prog, printable))


def add_training_flags(parser, train_steps, learning_rate, batch_size=32):
    training = parser.add_argument_group("training")
    training.add_argument("--train_steps", type=int, default=train_steps,
                          help="stop when the global step reaches this many updates")
    training.add_argument("--batch_size", type=int, default=batch_size,
                          help="examples per minibatch, per worker")
    training.add_argument("--learning_rate", type=float, default=learning_rate,
                          help="step size η of gradient descent")
    training.add_argument("--seed", type=int, default=0,
                          help="seeds the data split, the initial parameters and the shuffling")
    training.add_argument("--dataset", choices=["digits", "mnist"], default="digits",
                          help="'digits' ships with scikit-learn; 'mnist' downloads once")
    training.add_argument("--log_dir",
                          help="checkpoints and TensorBoard summaries go here, and a restarted "
                               "run resumes from them; without it nothing is written")
    training.add_argument("--log_every", type=int, default=250,
                          help="print progress and evaluate the test set every this many "
                               "local steps")
    training.add_argument("--checkpoint_every", type=int, default=500,
                          help="with --log_dir, save a checkpoint every this many global steps")
    training.add_argument("--step_delay", type=float, default=0.0,
                          help="seconds this task sleeps after each step: a deliberate "
                               "straggler, or an emulated compute time (tools/emulate)")
    training.add_argument("--payload_mb", type=float, default=0.0,
                          help="emulation (tools/emulate): θ carries one more variable of this "
                               "many MiB, which the model does not use (a zero gradient), so "
                               "that every exchange carries its bytes")


def check_training_flags(parser, args):
    """Every number in its range, said before any server starts."""
    for name, most in (("train_steps", 10 ** 9), ("batch_size", 10 ** 6), ("log_every", 10 ** 9),
                       ("checkpoint_every", 10 ** 9), ("seed", 2 ** 31 - 1)):
        least = 0 if name == "seed" else 1
        if not least <= getattr(args, name) <= most:
            parser.error("--%s must be an integer from %d to %d, got %d"
                         % (name, least, most, getattr(args, name)))
    for name, most in (("learning_rate", float("inf")), ("timeout", 10.0 ** 6),
                       ("step_delay", 3600.0), ("payload_mb", 4096.0)):
        if not hasattr(args, name):  # (the one-process baseline has no --timeout)
            continue
        value, positive = getattr(args, name), name in ("learning_rate", "timeout")
        if not (0 < value < most if positive else 0 <= value <= most):
            parser.error("--%s must be a finite number %s, got %g" % (
                name, "above 0" + (" and below %g" % most if most < float("inf") else "")
                if positive else "from 0 to %g" % most, value))
