"""The hami-devices conformance suite: certifies any vendor adapter."""
