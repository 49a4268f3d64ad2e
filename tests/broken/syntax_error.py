def factory(api):
    return [
