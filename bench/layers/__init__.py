"""CastSlice cut off after each layer, to price the layers one by one (bench.profile).

Each file is a functions-framework source like main.py and is served the same way;
where a layer stops, it answers what the floor answers. calibration.py is the
floor plus a known amount of pure-Python work, the scale the layers are read on.
"""
