# -- Your data and model, as the algorithms use them ----------------------------------------------
def handed_over(*arrays):
    """A dataset of one element, these NumPy arrays, which Python hands over at each pass:
    as constants in the graph they would be copied several times, and capped at 2 GB."""
    return tf.data.Dataset.from_generator(lambda: [arrays], tuple(a.dtype for a in arrays),
                                          tuple(a.shape for a in arrays))


def as_tensors(*arrays):
    """The arrays as tensors, handed over anew to each run that reads them."""
    with tf.device("/device:CPU:0"):  # (the worker's CPU, on a GPU worker too)
        return tf.data.make_one_shot_iterator(handed_over(*arrays).repeat()).get_next()


def worker_iterator(images, labels, worker, workers, batch_size, seed):
    """This worker's shard of the training set, shuffled and batched in the graph."""
    shard = handed_over(images[worker::workers], labels[worker::workers]).unbatch()
    shard = shard.shuffle(len(images) // workers + 1, seed=seed + worker).repeat()
    return tf.data.make_one_shot_iterator(shard.batch(batch_size))


class Model:
    """Your load_data() and model(), as the algorithms use them: θ is the list of variables
    model() makes; model() is called again with θ's values (tensors) in their place."""
    loaded = (None, None)  # (args, load_data(args)): the data are loaded once per task

    def __init__(self, args):
        if Model.loaded[0] is not args:  # (the check before the servers, then the graph)
            Model.loaded = (args, load_data(args))
        (train_images, train_labels), (test_images, test_labels) = Model.loaded[1]
        self.train_images, self.test_images = (np.asarray(train_images, np.float32),
                                               np.asarray(test_images, np.float32))
        self.train_labels, self.test_labels = (np.asarray(train_labels, np.int64),
                                               np.asarray(test_labels, np.int64))
        self.classes = int(max(self.train_labels.max(initial=0),
                               self.test_labels.max(initial=0))) + 1
        self.payload = int(args.payload_mb * 2 ** 18)  # (float32 elements)
        self.order = None  # which variable of θ each of model()'s requests gets
        self.seed = args.seed

    def parameters(self, scope=None, **variable_options):
        """A set of model()'s variables where the device scope puts them: θ, or a copy of it
        (under scope, with variable_options such as collections and trainable)."""
        requested = []

        def make(getter, name, *args, **kwargs):
            requested.append(getter(name, *args, **dict(kwargs, **variable_options)))
            return requested[-1]

        graph = tf.get_default_graph()
        graph.seed, seed = self.seed, graph.seed  # model() draws θ₀ from --seed, the graph's
        with tf.variable_scope(scope or tf.get_variable_scope(), custom_getter=make):
            model(tf.placeholder(tf.float32, (None,) + self.train_images.shape[1:]),
                  self.classes)
            made = list(collections.OrderedDict.fromkeys(requested))
            self.order = [made.index(variable) for variable in requested]
            if self.payload:
                made.append(tf.get_variable("payload", initializer=tf.zeros([self.payload]),
                                            **variable_options))
        graph.seed = seed
        return made

    def logits(self, theta, images):
        """model(images), each of its variables replaced by the tensor of θ at its place."""
        given = iter([theta[i] for i in self.order])

        def use_theta(getter, name, *args, **kwargs):
            return next(given)

        with tf.variable_scope(tf.get_variable_scope(), custom_getter=use_theta):
            return model(images, self.classes)

    def loss(self, theta, images, labels):
        """The mean softmax cross-entropy of a minibatch (+ 0·Σ payload: a zero gradient)."""
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=self.logits(theta, images)))
        return loss + 0.0 * tf.reduce_sum(theta[-1]) if self.payload else loss

    def accuracy(self, theta, images=None, labels=None):
        """The share of images (by default the test set) whose largest logit is their label."""
        if images is None:
            images, labels = as_tensors(self.test_images, self.test_labels)
        predictions = tf.argmax(self.logits(theta, images), axis=1)
        return tf.reduce_mean(tf.cast(tf.equal(predictions, labels), tf.float32))


def check_model_and_data(args, who, workers):
    """Whether load_data() and model() can train, said by every task in one line before any
    server starts: the data, the model's build, logits and gradients, a --log_dir checkpoint."""
    problem = model_and_data_problem(args, workers)
    if problem:
        print("[%s] error: %s" % (who, problem), file=sys.stderr, flush=True)
    return not problem


def model_and_data_problem(args, workers):
    with tf.Graph().as_default():
        try:
            net = Model(args)
        except Exception as error:  # (the user's load_data: any error, said in one line)
            return "load_data() failed (%s: %s): fix load_data in the script" % (
                type(error).__name__, error)
        train, test, labels = net.train_images, net.test_images, (net.train_labels,
                                                                  net.test_labels)
        if not workers <= len(train) == len(labels[0]) or not 0 < len(test) == len(labels[1]):
            return ("load_data() gave %d training examples (%d labels) for %d workers and %d "
                    "test examples (%d labels): every worker needs a shard and every image a "
                    "label" % (len(train), len(labels[0]), workers, len(test), len(labels[1])))
        if train.shape[1:] != test.shape[1:] or min(labels[0].min(), labels[1].min()) < 0:
            return ("training images of shape %s, test images of shape %s, smallest label %d: "
                    "images must have one shape and labels be 0 ... classes - 1" % (
                        train.shape[1:], test.shape[1:], min(labels[0].min(), labels[1].min())))
        try:
            theta = net.parameters()
            outside = sorted({v.op.name for v in tf.global_variables()}
                             - {v.op.name for v in theta})
            loss = net.loss(theta, train[:8], labels[0][:8])
            width = net.logits(theta, train[:8]).shape[-1]
        except Exception as error:
            return "model(images of shape %s, %d classes) failed (%s: %s): fix model in the " \
                   "script" % ((None,) + train.shape[1:], net.classes, type(error).__name__,
                               str(error).splitlines()[0] if str(error) else "")
        if outside:  # (tf.keras layers make theirs with tf.Variable)
            return ("model() makes variables that tf.get_variable did not make (%s): the "
                    "algorithm places only those, so build it with tf.layers or tf.get_variable, "
                    "not tf.keras layers or tf.Variable" % ", ".join(outside))
        if tf.get_collection(tf.GraphKeys.UPDATE_OPS):
            return ("model() makes state that is not a trained parameter (update ops): use "
                    "trainable variables only (no batch normalization's moving averages)")
        if width != net.classes:
            return ("model() returns %s logits per image for %d classes (labels 0 ... %d): its "
                    "last layer must have `classes` units" % (width, net.classes,
                                                              net.classes - 1))
        no_gradient = [v.op.name for v, g in zip(theta, tf.gradients(loss, theta)) if g is None]
        if no_gradient:
            return ("model() makes variables that get no gradient: %s: use every variable in "
                    "the logits, or do not make it" % ", ".join(no_gradient))
        with tf.Session(config=tf.ConfigProto(intra_op_parallelism_threads=1,
                                              inter_op_parallelism_threads=1)) as sess:
            sess.run(tf.global_variables_initializer())
            if not np.isfinite(sess.run(loss)):
                return ("the loss of model() at its initial θ is not finite: check load_data's "
                        "values and model's initial values")
        if args.log_dir and os.path.isdir(args.log_dir):
            # Five checkpoints kept and one being written, each θ and a meta graph (about three
            # times this check's graph), and the graph once more as text and in the events.
            graph = tf.get_default_graph().as_graph_def().ByteSize()
            needed = 6 * (sum(v.shape.num_elements() * v.dtype.size for v in theta)
                          + 3 * graph) + 16 * graph + 2 ** 20
            free = os.statvfs(args.log_dir).f_bavail * os.statvfs(args.log_dir).f_frsize
            if free < needed:
                return ("--log_dir %s has %d KiB free, and its checkpoints need about %d KiB: "
                        "free some space or name another directory"
                        % (args.log_dir, free // 1024, needed // 1024))
        checkpoint = args.log_dir and tf.train.latest_checkpoint(args.log_dir)
        try:
            saved = checkpoint and tf.train.load_checkpoint(checkpoint).get_variable_to_shape_map()
        except (tf.errors.OpError, ValueError):
            saved = None  # (a damaged checkpoint: the chief skips it, saying so)
        differ = ["%s (%s here, %s there)" % (v.op.name, v.shape.as_list(),
                                             saved.get(v.op.name, "none"))
                  for v in theta if saved and saved.get(v.op.name) != v.shape.as_list()]
        if differ:
            return ("--log_dir %s holds a checkpoint of another model: %s: give this model its "
                    "own --log_dir" % (args.log_dir, "; ".join(differ)))
    return None
