/*
 * The node's egress proxy needs the destination a sandbox connection had before nft
 * redirected it to the proxy: getsockopt(SO_ORIGINAL_DST), which Node has no API for.
 * originalDst(fd) -> "a.b.c.d:port" for an accepted IPv4 TCP socket (N-API, ABI-stable).
 * Built by scripts/build-envd.mjs into dist/node/original-dst.node.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <node_api.h>

static napi_value OriginalDst(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_value result;
  int32_t fd = -1;
  struct sockaddr_in sa;
  socklen_t len = sizeof(sa);
  char ip[INET_ADDRSTRLEN];
  char out[INET_ADDRSTRLEN + 8];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 1 || napi_get_value_int32(env, argv[0], &fd) != napi_ok || fd < 0) {
    napi_throw_type_error(env, NULL, "originalDst(fd): fd must be a non-negative integer");
    return NULL;
  }
  memset(&sa, 0, sizeof(sa));
  if (getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &sa, &len) != 0) {
    char msg[96];
    snprintf(msg, sizeof(msg), "getsockopt(SO_ORIGINAL_DST) on fd %d: %s", fd, strerror(errno));
    napi_throw_error(env, NULL, msg);
    return NULL;
  }
  inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof(ip));
  snprintf(out, sizeof(out), "%s:%u", ip, (unsigned)ntohs(sa.sin_port));
  napi_create_string_utf8(env, out, NAPI_AUTO_LENGTH, &result);
  return result;
}

static napi_value Init(napi_env env, napi_value exports) {
  napi_value fn;
  napi_create_function(env, "originalDst", NAPI_AUTO_LENGTH, OriginalDst, NULL, &fn);
  napi_set_named_property(env, exports, "originalDst", fn);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, Init)
