/* The few JSON-RPC messages the core itself reads or writes: the register frame, envelopes,
 * the serial `broker/register` request, refusals addressed to no request, and the answers to a
 * request too large to read and to one whose answer is too large to send. Everything else goes to
 * the slot's handler untouched. */
#ifndef MCPB_MESSAGES_H
#define MCPB_MESSAGES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MCPB_SLOT_MAX 64 /* bytes of UTF-8 in a slot name */

typedef struct {
    const char *device_id;        /* stable across reboots, e.g. the MAC address */
    const char *firmware_name;    /* e.g. "libmcpb-idf" */
    const char *firmware_version;
    const char *schema;           /* the hash of the slot's tools/list; NULL or "" to leave out */
} mcpb_hello_t;

/* {"jsonrpc":"2.0","method":"notifications/register","params":{"hello":{...},"slot":...,"aggregate":true}}
 * `slot` NULL leaves params.slot out (the URL or the envelope names the slot). Its length, 0 when
 * it does not fit. */
size_t mcpb_register_frame(char *out, size_t out_cap, const mcpb_hello_t *hello, const char *slot, int aggregate);

/* `{"provider":"<slot>","payload":` (the suffix is "}"): its length, 0 when it does not fit. */
size_t mcpb_envelope_prefix(char *out, size_t out_cap, const char *slot);

/* An envelope's slot (decoded, NUL-terminated) and the span of its payload: 0, or -1 when the
 * message is not an envelope or the slot name is over MCPB_SLOT_MAX bytes. */
int mcpb_envelope_parse(const char *message, size_t len, char slot[MCPB_SLOT_MAX + 1], size_t *payload_at,
                        size_t *payload_len);

/* 1 when a slot name is printable UTF-8: no C0 or C1 control, and every lead byte (none of C0, C1,
 * F5 to FF) with as many continuation bytes as it announces, in no overlong form. What
 * mcpb_client_init checks on /providers and serial, where a name the gateway cannot parse would cost
 * the frame; the gateway's refusal of a name it parses reaches the link events there. */
int mcpb_name_utf8_ok(const char *name);

/* 1 when a slot name holds only characters the gateway takes in a name (gateway/core/names.py):
 * mcpb_name_utf8_ok, no surrogate or code point past U+10FFFF, and none of: the format characters
 * (Cf: soft hyphen, zero-width characters and joiners, the bidirectional controls, the byte order mark, U+0600-0605, U+061C, U+06DD, U+070F, U+0890-0891,
 * U+08E2, U+180E, U+2060-206F, U+FFF9-FFFB, U+110BD, U+110CD, U+13430-1343F, U+1BCA0-1BCA3,
 * U+1D173-1D17A, the tags U+E0000-E007F), U+2028 and U+2029, private use (U+E000-F8FF, planes 15
 * and 16) and, of the unassigned code points (Cn), the noncharacters (U+FDD0-FDEF and the last two
 * of every plane), U+FFF0-FFF8 and planes 4 to 14 outside the variation selectors
 * U+E0100-E01EF. Other unassigned code points are left to the gateway, which knows its Unicode
 * version: a small table cannot. */
int mcpb_name_ok(const char *name);

/* 1 when the message is the notification {"jsonrpc":"2.0","method":"broker/register"} (any spacing). */
int mcpb_is_register_request(const char *message, size_t len);

/* 1 when the message is an error addressed to no request (id null): the gateway refusing or
 * letting go of the slot on a link without close codes. Its error.message goes to reason. */
int mcpb_refusal_in(const char *message, size_t len, char *reason, size_t reason_cap);

/* The -32600 answer to a request of `size` bytes that is over the frame cap, under the id found in
 * its first bytes (null when none is there). Its length, 0 when it does not fit. */
size_t mcpb_too_large_answer(char *out, size_t out_cap, const char *head, size_t head_len,
                             uint32_t size, size_t frame_max);

/* The -32603 answer "Response too large" to a request whose answer does not fit (its handler
 * returned a negative length), under the request's id (null when none is found). Its length, 0 when
 * it does not fit. */
size_t mcpb_too_large_response(char *out, size_t out_cap, const char *request, size_t len);

#ifdef __cplusplus
}
#endif

#endif
