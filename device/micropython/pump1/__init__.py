"""pump1: the pump-1 reference device (docs/pump-1.md) on top of the mcpdevice library.

Shared with the simulator (plain Python, CPython-compatible): physics, controller, tools,
hardware_sim, schema_hash and the constants below. Board-only: hardware_esp32, config, app.
"""

FIRMWARE_NAME = "pump-1-micropython"
FIRMWARE_VERSION = "0.1.0"
SERVER_NAME = "pump-1"
INSTRUCTIONS = (
    "pump-1 is a centrifugal water pump on a variable-speed drive (300 to 2900 rpm). "
    "Call get_status first. start runs it, set_speed changes the speed of a running pump, stop ramps it "
    "down; the motor ramps at 600 rpm per second, so poll get_status to see it arrive. A latched fault "
    "blocks start until reset_fault succeeds."
)
