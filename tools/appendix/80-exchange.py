# -- Exchanges with the ps, one message per ps task -----------------------------------------------
def by_ps_task(params):
    """[(device, indices of the variables on it)], one entry per ps task that holds some."""
    devices = sorted({variable.device for variable in params})
    return [(device, [i for i, variable in enumerate(params) if variable.device == device])
            for device in devices]


def read_from_the_ps(params):
    """θ as this worker uses it: one packed message per ps task, each variable read by
    an op made here (so that the caller's control dependencies hold it back)."""
    theta = [None] * len(params)
    for device, indices in by_ps_task(params):
        on_ps = [params[i] for i in indices]
        with tf.device(device):
            message = pack([variable.read_value() for variable in on_ps])
        for i, value in zip(indices, unpack(message, on_ps)):
            theta[i] = value
    return theta


def apply_on_the_ps(optimizer, gradients, params):
    """optimizer.apply_gradients on the ps, the gradients packed in one message."""
    arrived, updates = sent_to_the_ps(gradients, params), []
    for device, indices in by_ps_task(params):
        with tf.device(device):
            updates.append(optimizer.apply_gradients([(arrived[i], params[i]) for i in indices]))
    return tf.group(*updates)


def sent_to_the_ps(tensors, params):
    """Tensors shaped like params, as the ps tasks receive them: one message per task."""
    arrived = [None] * len(params)
    for device, indices in by_ps_task(params):
        on_ps = [params[i] for i in indices]
        message = pack([tensors[i] for i in indices])
        with tf.device(device):
            for i, value in zip(indices, unpack(message, on_ps)):
                arrived[i] = value
    return arrived
