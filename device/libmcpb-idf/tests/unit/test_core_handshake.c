/* The upgrade: SHA-1 and base64 vectors, RFC 6455's accept example, the request's bytes (path,
 * Host, key, provider token), and the check of the server's answer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "digest.h"
#include "mcpb/ws_handshake.h"

static void hex(const uint8_t *digest, char *out)
{
    static const char digits[] = "0123456789abcdef";
    int i;
    for (i = 0; i < 20; i++) {
        out[2 * i] = digits[digest[i] >> 4];
        out[2 * i + 1] = digits[digest[i] & 15];
    }
    out[40] = '\0';
}

static void sha1_text(const char *text, size_t repeat, char *out)
{
    mcpb_sha1_t sha;
    uint8_t digest[20];
    size_t i;
    mcpb_sha1_init(&sha);
    for (i = 0; i < repeat; i++) {
        mcpb_sha1_update(&sha, text, strlen(text));
    }
    mcpb_sha1_final(&sha, digest);
    hex(digest, out);
}

static void test_sha1_vectors(void **state)
{
    char out[41];
    (void)state;
    sha1_text("", 1, out);
    assert_string_equal(out, "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    sha1_text("abc", 1, out);
    assert_string_equal(out, "a9993e364706816aba3e25717850c26c9cd0d89d");
    sha1_text("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 1, out);
    assert_string_equal(out, "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
    sha1_text("a", 1000000, out);
    assert_string_equal(out, "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
}

static void test_base64_vectors(void **state)
{
    static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *const coded[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    char out[16];
    size_t i;
    (void)state;
    for (i = 0; i < 7; i++) {
        assert_int_equal(mcpb_base64_encode((const uint8_t *)plain[i], strlen(plain[i]), out, sizeof(out)),
                         strlen(coded[i]));
        assert_string_equal(out, coded[i]);
    }
    assert_int_equal(mcpb_base64_encode((const uint8_t *)"foobar", 6, out, 8), 0); /* no room for the NUL */
}

static void test_rfc6455_accept_example(void **state)
{
    char accept[MCPB_WS_ACCEPT_CHARS + 1];
    (void)state;
    mcpb_ws_accept_for("dGhlIHNhbXBsZSBub25jZQ==", accept);
    assert_string_equal(accept, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

static void test_key_from_nonce(void **state)
{
    static const uint8_t nonce[16] = {'t', 'h', 'e', ' ', 's', 'a', 'm', 'p', 'l', 'e', ' ', 'n', 'o', 'n', 'c', 'e'};
    char key[MCPB_WS_KEY_CHARS + 1];
    (void)state;
    mcpb_ws_make_key(nonce, key);
    assert_string_equal(key, "dGhlIHNhbXBsZSBub25jZQ==");
}

static void test_provider_path_percent_encodes_one_segment(void **state)
{
    char path[256];
    (void)state;
    assert_int_equal(mcpb_ws_provider_path("pump-c1", path, sizeof(path)), 17);
    assert_string_equal(path, "/provider/pump-c1");
    mcpb_ws_provider_path("a/b", path, sizeof(path));
    assert_string_equal(path, "/provider/a%2Fb");
    mcpb_ws_provider_path("Cell 3.\xc3\xa9", path, sizeof(path));
    assert_string_equal(path, "/provider/Cell%203.%C3%A9");
    assert_int_equal(mcpb_ws_provider_path("abcdef", path, 14), 0);
}

static void test_request_bytes(void **state)
{
    char out[1024];
    size_t n;
    (void)state;
    n = mcpb_ws_request(out, sizeof(out), "127.0.0.1", 3000, "/provider/pump-1", "dGhlIHNhbXBsZSBub25jZQ==",
                        "s3cret", "libmcpb-idf");
    assert_int_equal(n, strlen(out));
    assert_string_equal(out,
                        "GET /provider/pump-1 HTTP/1.1\r\nHost: 127.0.0.1:3000\r\nUpgrade: websocket\r\n"
                        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                        "Sec-WebSocket-Version: 13\r\nUser-Agent: libmcpb-idf\r\nX-Provider-Token: s3cret\r\n\r\n");
    mcpb_ws_request(out, sizeof(out), "::1", 80, "/providers", "k", NULL, "a");
    assert_non_null(strstr(out, "Host: [::1]:80\r\n"));
    assert_null(strstr(out, "X-Provider-Token"));
    assert_int_equal(mcpb_ws_request(out, 40, "h", 1, "/p", "k", NULL, "a"), 0);
}

static void test_parse_response(void **state)
{
    static const char key[] = "dGhlIHNhbXBsZSBub25jZQ==";
    static const char ok[] = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                             "SEC-WEBSOCKET-ACCEPT:   s3pPLMBiTxaQ9kYGzzhZRbK+xOo=  \r\n\r\n\x81\x02{}";
    static const char wrong[] = "HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: "
                                "s3pPLMBiTxaQ9kYGzzhZRbK+xOp=\r\n\r\n";
    static const char refused[] = "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"provider\"\r\n"
                                  "Content-Type: application/json\r\nContent-Length: 35\r\n\r\n"
                                  "{\"error\":\"provider_token_required\"}";
    mcpb_http_response_t response;
    (void)state;
    assert_int_equal(mcpb_ws_parse_response(ok, sizeof(ok) - 1, key, &response), 1);
    assert_int_equal(response.status, 101);
    assert_true(response.accept_ok);
    assert_int_equal(response.head_len, sizeof(ok) - 1 - 4);
    assert_int_equal(mcpb_ws_parse_response(ok, 40, key, &response), 0); /* more bytes needed */
    assert_int_equal(mcpb_ws_parse_response(wrong, sizeof(wrong) - 1, key, &response), 1);
    assert_false(response.accept_ok);
    assert_int_equal(mcpb_ws_parse_response(refused, sizeof(refused) - 1, key, &response), 1);
    assert_int_equal(response.status, 401);
    assert_false(response.accept_ok);
    assert_int_equal(response.content_length, 35);
    assert_int_equal(mcpb_ws_parse_response("SSH-2.0-OpenSSH\r\n\r\n", 19, key, &response), -1);
    assert_int_equal(mcpb_ws_parse_response("HTTP/1.1 x\r\n\r\n", 14, key, &response), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha1_vectors),
        cmocka_unit_test(test_base64_vectors),
        cmocka_unit_test(test_rfc6455_accept_example),
        cmocka_unit_test(test_key_from_nonce),
        cmocka_unit_test(test_provider_path_percent_encodes_one_segment),
        cmocka_unit_test(test_request_bytes),
        cmocka_unit_test(test_parse_response),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
