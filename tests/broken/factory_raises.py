def factory(api):
    raise RuntimeError("factory broke")
