# -- Tensors in one message -----------------------------------------------------------------------
def pack(tensors):
    """Tensors as one flat vector (the inverse of unpack)."""
    return tf.concat([tf.reshape(tensor, [-1]) for tensor in tensors], axis=0)


def unpack(vector, like):
    """Tensors shaped like the variables `like`, cut from a vector that pack made."""
    pieces = tf.split(vector, [variable.shape.num_elements() for variable in like])
    return [tf.reshape(piece, variable.shape) for piece, variable in zip(pieces, like)]
