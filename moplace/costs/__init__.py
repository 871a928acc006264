"""How long an op or a transfer takes: measured profiles scaled by device speed
(`costmodel`), link figures fitted to measured transfers (`linkfit`) and roofline estimates for
device kinds nobody profiled (`analytic`, `devicespecs`). Imports only `moplace.core`.
"""
