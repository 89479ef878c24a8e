# -- K steps per session.run (--steps_per_run) ----------------------------------------------------
def repeat(step, steps):
    """step() builds one training step and returns {"train_op": the global step after it, "loss":
    its loss}. With K = steps > 1, K such steps run one after the other in a tf.while_loop, in one
    session.run: the same updates, K - 1 round trips fewer; "loss" is then the K losses."""
    if steps == 1:
        return step()
    on_the_ps = tf.train.get_global_step().device

    def body(index, global_step, written, losses):
        made = len(tf.get_default_graph().get_operations())
        anchors = [global_step, written, losses.flow]
        ops = step()
        losses = losses.write(written, ops["loss"])
        following, written = index + 1, written + 1
        with tf.device(on_the_ps):  # the loop's global step stays on the ps: one round trip
            after = (following, tf.identity(ops["train_op"]), written, losses)
        local_go_ahead(tf.get_default_graph().get_operations()[made:], index, anchors)
        return after

    with tf.device(on_the_ps):
        first = tf.constant(0, tf.int64)
    with tf.device(beside_its_input):
        ran, global_step, _, losses = tf.while_loop(
            lambda index, *_: index < steps, body,
            [tf.constant(0), first, tf.constant(0), kept_here(tf.float32, steps)],
            parallel_iterations=1, back_prop=False)
    return {"train_op": global_step, "loss": losses.gather(tf.range(ran))}


def local_go_ahead(ops, pivot, anchors):
    """In a loop's body, an op that takes nothing from the loop waits for a loop
    variable on its own device, not for the pivot's go-ahead from another task."""
    local = {anchor.device: anchor.op for anchor in anchors if anchor.device != pivot.device}
    for op in ops:
        if pivot.op in op.control_inputs and op.device in local:
            others = [control for control in op.control_inputs if control is not pivot.op]
            op._remove_all_control_inputs()  # (the edge tf.while_loop gave it, and the others)
            for control in others + [local[op.device]]:
                op._add_control_input(control)


def kept_here(dtype, size):
    """A TensorArray that stays on this worker (its writes do not cross to the ps)."""
    return tf.TensorArray(dtype, size, colocate_with_first_write_call=False)


def beside_its_input(op):
    """A device function: tf.while_loop's own ops go where their input is."""
    loop = ("Enter", "Merge", "Switch", "NextIteration", "Exit", "RefEnter", "RefMerge",
            "RefSwitch", "RefNextIteration", "RefExit", "LoopCond")
    if op.device or not op.inputs:
        return op.device
    if op.type in loop or op.type == "Identity" and op.inputs[0].op.type in ("Switch",
                                                                           "RefSwitch"):
        return op.inputs[0].device
    return op.device
