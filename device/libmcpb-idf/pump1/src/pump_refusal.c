/* The device's texts (pump_refusal.h). */
#include "pump_refusal.h"

#include <string.h>

#include "json_number.h"
#include "pump1_schema.h"
#include "pump_controller.h"
#include "pump_physics.h"

/* Phrases that several texts share, written once: the code 0x0E + k stands for the k-th (the codes
 * below 0x0E are the T_* values of pump_refusal.h). */
#define F_THE_MOTOR "\16"
#define F_RESET_AGAIN "\17"
#define F_RESET "\20"
#define F_NOTHING "\21"
#define F_SPEED_RULE "\22"
#define F_PERSISTS "\23"
#define F_REQUEST "\24"
#define F_PARAMS "\25"
#define F_BYTES "\26"
#define F_TAKES "\27"
#define F_STOPPED "\30"
#define F_SPEED "\31"
#define F_RANGE "\32"
#define F_SUCTION "\33"
#define F_CHECK "\34"
#define F_DEVICE "\35"
#define F_THE_PUMP "\36"
#define F_PUMP_IS "\37"

static const char phrases[] = /* one string: each phrase ends in a NUL */
    "the motor \0"
    F_RESET " again.\0"
    ", then call reset_fault\0"
    " reads nothing valid\0"
    F_SPEED " must be a whole number of rpm" F_RANGE ", got \0"
    " fault persists: \0"
    "Invalid Request: \0"
    "Invalid params: \0"
    " bytes\0"
    ": this tool takes \0"
    ", so the device stopped \0"
    "speed_rpm\0"
    " between 300 and 2900\0"
    " the suction side\0"
    ". Check \0"
    ". This device \0"
    "the pump\0"
    "The pump is \0";

const char P1_UNKNOWN_ARGUMENT_SPEED[] = "Unknown argument " T_STRING F_TAKES "only " F_SPEED ".";
const char P1_UNKNOWN_ARGUMENT_NONE[] = "Unknown argument " T_STRING F_TAKES "no arguments.";
const char P1_SPEED_NOT_NUMBER[] = F_SPEED_RULE T_DUMPS;
const char P1_SPEED_NOT_WHOLE[] = F_SPEED_RULE T_REPR;
const char P1_SPEED_OUT_OF_RANGE[] = F_SPEED " " T_INT " is out of range: this pump runs" F_RANGE " rpm.";
const char P1_IN_FAULT[] = F_PUMP_IS "in fault " T_FAULT_CODE ": " T_FAULT_TEXT;
const char P1_NOT_RUNNING[] =
    F_PUMP_IS T_STATE "; set_speed only changes a running pump. Call start with " F_SPEED " to run it.";
const char P1_SPEED_MISSING[] = "set_speed needs " F_SPEED ", the new speed in rpm (300 to 2900).";
const char P1_OVERTEMP_UNREADABLE[] =
    "The overtemp fault cannot be reset: " F_THE_MOTOR "temperature sensor" F_NOTHING ".";
const char P1_OVERTEMP_PERSISTS[] = "The overtemp" F_PERSISTS F_THE_MOTOR "is at " T_TEMP
                                    " C, above the reset limit of 85 C. Let it cool" F_RESET_AGAIN;
const char P1_SENSOR_PERSISTS[] = "The sensor_failure" F_PERSISTS "sensor " T_SENSORS " still" F_NOTHING
                                  F_CHECK "its wiring" F_RESET_AGAIN;
const char P1_DRY_RUN_PERSISTS[] = "The dry_run" F_PERSISTS F_THE_PUMP " still has no water on its suction side. "
                                   "Prime it and check" F_SUCTION F_RESET_AGAIN;

const char P1_LINK_LOST_TEXT[] = "No request or ping from the gateway for " T_NUMBER " s while " F_THE_MOTOR "turned"
                                 F_STOPPED "it" F_CHECK "the network and the gateway" F_RESET " and start.";
const char P1_SENSOR_FAILURE_TEXT[] = "Sensor " T_SENSORS F_NOTHING " (open or shorted loop)" F_STOPPED F_THE_PUMP
                                      F_CHECK "the sensor wiring" F_RESET ".";
const char P1_OVERTEMP_TEXT[] = "Motor temperature " T_TEMP " C is above the trip limit of 95 C, so the drive "
                                "stopped " F_THE_PUMP ". Let " F_THE_MOTOR "cool below 85 C" F_RESET ".";
const char P1_DRY_RUN_TEXT[] = "Flow stayed below 20% of the expected " T_FLOW " L/min while running: "
                               F_THE_PUMP " is running dry" F_CHECK "priming and" F_SUCTION F_RESET ".";

const char P1_PARSE_ERROR[] = "Parse error: the frame is not valid JSON (" T_NUMBER F_BYTES ")";
const char P1_REQUEST_TOO_LARGE[] =
    "Request too large: " T_NUMBER F_BYTES "; this device accepts frames of at most " T_FRAME_MAX F_BYTES;
const char P1_RESPONSE_TOO_LARGE[] = "Response too large: " T_NUMBER F_BYTES;
const char P1_NOT_AN_OBJECT[] = F_REQUEST "send one JSON-RPC object per frame, no batches";
const char P1_BAD_ID[] = F_REQUEST "id must be a string or an integer";
const char P1_NO_METHOD[] = F_REQUEST "needs \"jsonrpc\":\"2.0\" and a method";
const char P1_PARAMS_NOT_OBJECT[] = F_PARAMS "params must be an object";
const char P1_ARGUMENTS_NOT_OBJECT[] = F_PARAMS "arguments must be an object";
const char P1_UNKNOWN_CURSOR[] = F_PARAMS "unknown cursor " T_DUMPS;
const char P1_UNKNOWN_TOOL[] = "Unknown tool: " T_DUMPS F_DEVICE "offers " T_TOOLS;
const char P1_UNKNOWN_METHOD[] =
    "Method not found: " T_STRING F_DEVICE "answers initialize, ping, tools/list and tools/call";

static const char *const fault_codes[] = {"", "link_lost", "sensor_failure", "overtemp", "dry_run"};
static const char *const state_names[] = {"stopped", "starting", "running", "stopping", "fault"};

void p1_pump_write_text(json_sink_t *sink, const char *text, const pump_text_args_t *args)
{
    static const char *const sensors[] = {"flow", "pressure", "temperature"};
    const mcpb_pump1_t *pump = args->pump;
    const char *sep;
    int c, i;
    while ((c = (unsigned char)*text++) != 0) {
        switch (c) {
        case 1:
            p1_json_sink_text(sink, fault_codes[pump->fault]);
            break;
        case 2:
            p1_json_sink_text(sink, pump->fault_text);
            break;
        case 3:
            p1_json_sink_text(sink, state_names[pump->state]);
            break;
        case 4:
            sep = "";
            for (i = 0; i < 3; i++) {
                if (!(pump->reading.valid & (1u << i))) {
                    p1_json_sink_text(sink, sep);
                    p1_json_sink_text(sink, sensors[i]);
                    sep = " and ";
                }
            }
            break;
        case 5:
            p1_json_fixed(sink, pump->reading.motor_temp_c, 1, 0);
            break;
        case 6:
            p1_json_fixed(sink, p1_pump_expected_flow(pump->speed), 0, 0);
            break;
        case 7:
            p1_json_sink_dumps(sink, args->value);
            break;
        case 8:
            p1_json_sink_string_text(sink, args->value);
            break;
        case 9:
            p1_json_number_float(sink, args->value, 0);
            break;
        case 10:
            p1_json_number_as_int(sink, args->value);
            break;
        case 11:
            p1_json_sink_unsigned(sink, args->number);
            break;
        case 12:
            for (i = 0; i < PUMP1_TOOL_COUNT; i++) {
                p1_json_sink_text(sink, i == 0 ? "" : ", ");
                p1_json_sink_text(sink, pump1_tools[i].name);
            }
            break;
        case 13:
            p1_json_sink_unsigned(sink, (unsigned long)pump->config.frame_max);
            break;
        default:
            if (c >= 0x0E && c < 0x20) {
                const char *phrase = phrases;
                for (c -= 0x0E; c > 0; c--) {
                    phrase += strlen(phrase) + 1;
                }
                p1_pump_write_text(sink, phrase, args);
            } else {
                p1_json_sink_char(sink, (uint32_t)c);
            }
            break;
        }
    }
}
