"""What torch-neuronx changes in other libraries so that they know the device.

Each module adapts one library (or one part of torch) that has no hook for a
new device: it either registers through a mechanism the library offers (the
multiprocessing reducers) or wraps one of the library's functions
(``monkey_patch.wrap``), installed when torch-neuronx registers the device
(``torch_neuronx/__init__.py``, step 7) or when the library is first imported
(``import_hooks.on_import``). docs/architecture.md lists each one, why it
must stay, and the upstream change that would remove it.
"""
