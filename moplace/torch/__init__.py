"""The PyTorch front end: a model file's training step traced at aten level into an `OpGraph`.

A model file defines ``build(batch_size)`` returning ``(model, loss, optimizer, (x, y))``,
as the Keras front end's do (`moplace.torch.modelfile`), with a ``torch.nn.Module``, a loss
``loss(output, y)`` and a ``torch.optim`` optimizer. moplace builds it under PyTorch's fake
tensors, so no weight or activation is allocated and a model of any size traces on a laptop,
then traces the joint forward and backward with AOTAutograd (`moplace.torch.trace`) and adds
the optimizer's update per parameter (`moplace.torch.convert`), with roofline estimates of
each op's time on the device kinds asked for (`moplace.torch.estimate`).

Importing this package imports torch (an optional extra: ``pip install 'moplace[torch]'``);
``import moplace`` does not.
"""
