"""The bandwidth roofline: the decode ceiling a GPU's memory bandwidth allows (bytes read per
step, tensor-parallel degree, acceptance length), below both ``bench`` (each report carries it)
and ``tune`` (it bounds the predicted throughput per k)."""
