"""ESP32 boot: runs before main.py. Collect garbage early and often: the heap is small (no PSRAM)
and fragmentation, not total use, is what ends a long-running board."""

import gc

gc.collect()
gc.threshold(gc.mem_free() // 4 + gc.mem_alloc())
