/*
 * The btrfs operations of a sandbox's create and its first metrics sample as ioctls, not
 * `btrfs` processes (each process ~2.5 ms of CPU on this 2-core machine): a writable
 * snapshot of a subvolume, its qgroup's referenced-bytes limit and its id, as `btrfs
 * subvolume snapshot <src> <dir>/<name>`, `btrfs qgroup limit <bytes> <path>` and `btrfs
 * inspect-internal rootid <path>` get them (BTRFS_IOC_SNAP_CREATE_V2, BTRFS_IOC_QGROUP_LIMIT,
 * BTRFS_IOC_INO_LOOKUP). A snapshot waits for a transaction commit (tens of ms): all run on
 * libuv's thread pool, never on the caller's loop.
 *
 * snapshot(src, dir, name) -> Promise<void>; qgroupLimit(path, bytes) -> Promise<void>;
 * subvolumeId(path) -> Promise<number>.
 * A failure rejects with an Error whose `code` is the errno's name (EEXIST, ENOSPC, ...).
 * Built by scripts/build-envd.mjs into dist/node/btrfs-ioctl.node (N-API, ABI-stable).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/btrfs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <node_api.h>

struct work {
  napi_async_work async;
  napi_deferred deferred;
  char *src; /* snapshot: the source subvolume; limit: the subvolume */
  char *dir; /* snapshot: the directory the snapshot is made in */
  char *name;
  uint64_t bytes;
  /* subvolumeId: the answer (resolved as a number; the others resolve undefined) */
  uint64_t id;
  int answers;
  int err;
  const char *op;
};

static void snapshot_execute(napi_env env, void *data) {
  struct work *w = data;
  struct btrfs_ioctl_vol_args_v2 args;
  int src = -1, dir = -1;
  (void)env;
  if (strlen(w->name) >= sizeof args.name) {
    w->err = ENAMETOOLONG;
    return;
  }
  if ((src = open(w->src, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 || (dir = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
    w->err = errno;
  } else {
    memset(&args, 0, sizeof args);
    args.fd = src;
    strcpy(args.name, w->name);
    if (ioctl(dir, BTRFS_IOC_SNAP_CREATE_V2, &args) < 0) w->err = errno;
  }
  if (src >= 0) close(src);
  if (dir >= 0) close(dir);
}

/* `req` on the directory w->src, its errno in w->err; 0 when it succeeded. */
static int ioctl_on_src(struct work *w, unsigned long req, void *args) {
  int fd = open(w->src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || ioctl(fd, req, args) < 0) w->err = errno;
  if (fd >= 0) close(fd);
  return w->err;
}

static void limit_execute(napi_env env, void *data) {
  struct work *w = data;
  struct btrfs_ioctl_qgroup_limit_args args;
  (void)env;
  memset(&args, 0, sizeof args);
  /* qgroupid 0: the qgroup of the subvolume w->src is in (0/<its id>), as `btrfs qgroup limit <size> <path>`. */
  args.lim.flags = BTRFS_QGROUP_LIMIT_MAX_RFER;
  args.lim.max_rfer = w->bytes;
  ioctl_on_src(w, BTRFS_IOC_QGROUP_LIMIT, &args);
}

static void rootid_execute(napi_env env, void *data) {
  struct work *w = data;
  struct btrfs_ioctl_ino_lookup_args args;
  (void)env;
  memset(&args, 0, sizeof args);
  /* The first inode of any subvolume (BTRFS_FIRST_FREE_OBJECTID): the lookup names the tree it is in. */
  args.objectid = 256;
  if (!ioctl_on_src(w, BTRFS_IOC_INO_LOOKUP, &args)) w->id = args.treeid;
}

static void complete(napi_env env, napi_status status, void *data) {
  struct work *w = data;
  napi_value v;
  if (status == napi_ok && !w->err) {
    if (w->answers) napi_create_double(env, (double)w->id, &v);
    else napi_get_undefined(env, &v);
    napi_resolve_deferred(env, w->deferred, v);
  } else {
    int e = w->err ? w->err : EIO;
    char msg[512];
    napi_value code, text;
    snprintf(msg, sizeof msg, "%s %s%s%s: %s %s", w->op, w->src, w->dir ? " to " : "", w->dir ? w->dir : "", strerrorname_np(e) ? strerrorname_np(e) : "EIO", strerror(e));
    napi_create_string_utf8(env, strerrorname_np(e) ? strerrorname_np(e) : "EIO", NAPI_AUTO_LENGTH, &code);
    napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &text);
    napi_create_error(env, code, text, &v);
    napi_reject_deferred(env, w->deferred, v);
  }
  napi_delete_async_work(env, w->async);
  free(w->src);
  free(w->dir);
  free(w->name);
  free(w);
}

/* A JS string argument as a malloc'd C string (NULL and a pending TypeError when it is not one). */
static char *string_arg(napi_env env, napi_value v, const char *usage) {
  size_t len;
  char *s;
  if (napi_get_value_string_utf8(env, v, NULL, 0, &len) != napi_ok) {
    napi_throw_type_error(env, NULL, usage);
    return NULL;
  }
  if (!(s = malloc(len + 1))) {
    napi_throw_error(env, "ENOMEM", "btrfs-ioctl: out of memory");
    return NULL;
  }
  napi_get_value_string_utf8(env, v, s, len + 1, &len);
  return s;
}

static napi_value queue(napi_env env, struct work *w, napi_async_execute_callback execute) {
  napi_value promise, name;
  napi_create_promise(env, &w->deferred, &promise);
  napi_create_string_utf8(env, w->op, NAPI_AUTO_LENGTH, &name);
  napi_create_async_work(env, NULL, name, execute, complete, w, &w->async);
  napi_queue_async_work(env, w->async);
  return promise;
}

/* A work item for `op` (NULL and a pending error when out of memory). */
static struct work *new_work(napi_env env, const char *op) {
  struct work *w = calloc(1, sizeof *w);
  if (!w) napi_throw_error(env, "ENOMEM", "btrfs-ioctl: out of memory");
  else w->op = op;
  return w;
}

static napi_value Snapshot(napi_env env, napi_callback_info info) {
  static const char usage[] = "snapshot(src, dir, name): strings";
  size_t argc = 3;
  napi_value argv[3];
  struct work *w = new_work(env, "snapshot");
  if (!w) return NULL;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 3 || !(w->src = string_arg(env, argv[0], usage)) || !(w->dir = string_arg(env, argv[1], usage)) || !(w->name = string_arg(env, argv[2], usage))) {
    if (argc < 3) napi_throw_type_error(env, NULL, usage);
    free(w->src);
    free(w->dir);
    free(w);
    return NULL;
  }
  return queue(env, w, snapshot_execute);
}

static napi_value QgroupLimit(napi_env env, napi_callback_info info) {
  static const char usage[] = "qgroupLimit(path, bytes): a string and a positive integer";
  size_t argc = 2;
  napi_value argv[2];
  int64_t bytes;
  struct work *w = new_work(env, "qgroup limit");
  if (!w) return NULL;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 2 || napi_get_value_int64(env, argv[1], &bytes) != napi_ok || bytes <= 0 || !(w->src = string_arg(env, argv[0], usage))) {
    bool pending = false;
    napi_is_exception_pending(env, &pending);
    if (!pending) napi_throw_type_error(env, NULL, usage);
    free(w);
    return NULL;
  }
  w->bytes = (uint64_t)bytes;
  return queue(env, w, limit_execute);
}

static napi_value SubvolumeId(napi_env env, napi_callback_info info) {
  static const char usage[] = "subvolumeId(path): a string";
  size_t argc = 1;
  napi_value argv[1];
  struct work *w = new_work(env, "subvolume id of");
  if (!w) return NULL;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 1 || !(w->src = string_arg(env, argv[0], usage))) {
    if (argc < 1) napi_throw_type_error(env, NULL, usage);
    free(w);
    return NULL;
  }
  w->answers = 1;
  return queue(env, w, rootid_execute);
}

static napi_value Init(napi_env env, napi_value exports) {
  napi_value fn;
  napi_create_function(env, "snapshot", NAPI_AUTO_LENGTH, Snapshot, NULL, &fn);
  napi_set_named_property(env, exports, "snapshot", fn);
  napi_create_function(env, "qgroupLimit", NAPI_AUTO_LENGTH, QgroupLimit, NULL, &fn);
  napi_set_named_property(env, exports, "qgroupLimit", fn);
  napi_create_function(env, "subvolumeId", NAPI_AUTO_LENGTH, SubvolumeId, NULL, &fn);
  napi_set_named_property(env, exports, "subvolumeId", fn);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, Init)
