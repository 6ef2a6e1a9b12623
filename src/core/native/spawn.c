/*
 * A process spawner without fork (N-API, ABI-stable), for envd's commands
 * (envd/process/spawner.ts) and the node's spawn server (core/spawn-server.mjs).
 *
 * Why not child_process.spawn: libuv forks, and fork copies the page tables of the
 * caller's whole heap: for envd half of its CPU per command (~1.1 ms at 55 MB RSS,
 * growing with the heap), for the spawn server ~1.2 ms of its event loop per command,
 * ten of them on a sandbox's create. Here the child shares the caller's memory until it
 * execs (clone(CLONE_VM | CLONE_VFORK), as glibc's posix_spawn does), so the cost does
 * not depend on the caller's size. posix_spawn itself cannot switch users, hence this file.
 *
 * spawn(candidates, argv, envp, cwd, uid, gid, stdin[, fds[, namespaces]]) -> { pid, stdin?,
 *   stdout?, stderr? } or { error: errno } when no candidate could be executed ({ error,
 *   namespace: i } when joining namespaces[i] failed). `candidates` are
 *   the paths to try in order (the PATH lookup is done by the caller); `stdin` false
 *   gives the child /dev/null; `cwd` "" keeps the caller's; uid and gid 0xffffffff keep
 *   the caller's (and its groups). `fds`, when given, are the child's descriptors 0..n-1:
 *   an open descriptor of the caller each, or -1 at 0, 1 or 2 for a pipe as without it.
 *   `namespaces`: files of namespaces the child joins first (/run/netns/<name>,
 *   /proc/<pid>/ns/uts), as nsenter would, without nsenter's own exec.
 *   The child: its own session (setsid), the namespaces joined, signal dispositions reset
 *   to the default and the mask cleared, supplementary groups dropped, then gid and uid set
 *   (what libuv does for spawn with uid/gid), cwd, and its descriptors in place.
 * wait(pid) -> undefined while it runs, else { code } or { signal }; reaps it.
 * writeIn(namespaces, path, content) -> 0, or { error: errno[, namespace: i] }: writes
 *   `content` to `path` from a child that joined `namespaces` first and exits, no exec: a
 *   network namespace's sysctl, a UTS namespace's hostname (/proc/sys/kernel/hostname), each
 *   the namespace of whoever opens the file. Returns once the child is reaped.
 * netnsAdd(path) -> 0 or { error: errno }: a new network namespace bound at `path` (an
 *   existing empty file), as `ip netns add` does, from a child that unshares it and exits.
 * netlinkIn(namespaces, protocol, request[, files]) -> Buffer of the kernel's replies, or
 *   { error: errno[, namespace: i][, file: i] }: sends `request` (netlink messages, no dump
 *   requests) on a netlink socket of `protocol` opened by a child that joined `namespaces`
 *   first (a socket belongs to the network namespace it was made in), as `ip -n`/`nft` in
 *   that namespace would, without their exec. `files[i]` is opened (read-only) as the
 *   child's descriptor NETLINK_FILES_FD + i first, for messages that name one (a network
 *   namespace's, IFLA_NET_NS_FD). The kernel handles route and netfilter requests inside the
 *   send, so every reply is queued when it returns: the child reads them without waiting.
 *
 * The child runs on the caller's memory while the caller is suspended: it makes only raw
 * system calls (no malloc, no glibc setuid, which would signal envd's other threads).
 * Built by scripts/build-envd.mjs: gcc -shared -fPIC -I/usr/include/node.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <linux/netlink.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <node_api.h>

#define CHILD_STACK (64 * 1024)
#define MAX_FDS 16
#define KEEP_ID 0xffffffffu

/* The children's stack: each runs while its caller is suspended (CLONE_VFORK), one at a time. */
static char stack[CHILD_STACK] __attribute__((aligned(16)));

/* Joins each namespace file in turn; on failure its index in *failed and -1 (errno set). */
static int join_namespaces(char **namespaces, volatile int *failed) {
  for (int i = 0; namespaces && namespaces[i]; i++) {
    int fd = syscall(SYS_openat, AT_FDCWD, namespaces[i], O_RDONLY | O_CLOEXEC);
    if (fd < 0 || syscall(SYS_setns, fd, 0) < 0) {
      *failed = i;
      return -1;
    }
    syscall(SYS_close, fd);
  }
  return 0;
}

struct child_args {
  char **candidates;
  char **argv;
  /* { "/bin/sh", <candidate>, argv[1..], NULL }: execvp runs a file without a known
   * format (ENOEXEC, a script without #!) with /bin/sh; the child fills in slot 1. */
  char **sh_argv;
  char **envp;
  const char *cwd;
  uint32_t uid;
  uint32_t gid;
  int fds[MAX_FDS];
  int nfds;
  char **namespaces;
  /* The namespace whose join failed (-1: none). */
  volatile int failed_namespace;
  sigset_t oldmask;
  volatile int error;
};

static int child_main(void *p) {
  struct child_args *a = p;
  struct sigaction dfl;
  sigset_t none;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  /* Handlers of envd's memory must not run in the child; ignored signals (SIGPIPE) are
   * reset too, as libuv does, so commands see default dispositions. */
  for (int s = 1; s < NSIG; s++)
    if (s != SIGKILL && s != SIGSTOP) sigaction(s, &dfl, NULL);
  sigemptyset(&none);
  if (syscall(SYS_setsid) < 0) goto fail;
  if (join_namespaces(a->namespaces, &a->failed_namespace) < 0) goto fail;
  /* A source that is also a later target would be overwritten before it is moved: moved
   * above every target first (close-on-exec: only its copy in place survives the exec). */
  for (int i = 0; i < a->nfds; i++)
    if (a->fds[i] != i && a->fds[i] < a->nfds && (a->fds[i] = fcntl(a->fds[i], F_DUPFD_CLOEXEC, a->nfds)) < 0) goto fail;
  for (int i = 0; i < a->nfds; i++) {
    if (a->fds[i] == i) {
      if (fcntl(i, F_SETFD, 0) < 0) goto fail;
    } else if (syscall(SYS_dup2, a->fds[i], i) < 0) goto fail;
  }
  if (a->uid != KEEP_ID || a->gid != KEEP_ID) {
    if (syscall(SYS_setgroups, 0, NULL) < 0 && errno != EPERM) goto fail;
    if (syscall(SYS_setgid, a->gid) < 0) goto fail;
    if (syscall(SYS_setuid, a->uid) < 0) goto fail;
  }
  if (a->cwd && syscall(SYS_chdir, a->cwd) < 0) goto fail;
  syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, _NSIG / 8);
  {
    int err = ENOENT;
    for (char **c = a->candidates; *c; c++) {
      syscall(SYS_execve, *c, a->argv, a->envp);
      if (errno == ENOEXEC) {
        a->sh_argv[1] = *c;
        syscall(SYS_execve, "/bin/sh", a->sh_argv, a->envp);
        err = errno;
        break;
      }
      if (errno == EACCES) err = EACCES;
      else if (errno != ENOENT && errno != ENOTDIR) {
        err = errno;
        break;
      }
    }
    a->error = err;
    syscall(SYS_exit_group, 127);
  }
fail:
  a->error = errno;
  syscall(SYS_exit_group, 127);
  return 0;
}

static void free_strings(char **v) {
  if (!v) return;
  for (char **p = v; *p; p++) free(*p);
  free(v);
}

/* A JS array of strings as a NULL-terminated C array (NULL and a thrown error on failure). */
static char **strings(napi_env env, napi_value arr, const char *what) {
  uint32_t n;
  if (napi_get_array_length(env, arr, &n) != napi_ok) {
    napi_throw_type_error(env, NULL, what);
    return NULL;
  }
  char **v = calloc((size_t)n + 1, sizeof(char *));
  if (!v) return NULL;
  for (uint32_t i = 0; i < n; i++) {
    napi_value s;
    size_t len;
    if (napi_get_element(env, arr, i, &s) != napi_ok || napi_get_value_string_utf8(env, s, NULL, 0, &len) != napi_ok) {
      free_strings(v);
      napi_throw_type_error(env, NULL, what);
      return NULL;
    }
    v[i] = malloc(len + 1);
    if (!v[i]) {
      free_strings(v);
      return NULL;
    }
    napi_get_value_string_utf8(env, s, v[i], len + 1, &len);
  }
  return v;
}

/* What Spawn allocated for the child, freed on every way out. */
static void free_args(struct child_args *a, char *cwd) {
  free_strings(a->candidates);
  free_strings(a->argv);
  free_strings(a->envp);
  free_strings(a->namespaces);
  free(cwd);
  free(a->sh_argv);
}

static napi_value int_prop(napi_env env, napi_value obj, const char *name, int v) {
  napi_value x;
  napi_create_int32(env, v, &x);
  napi_set_named_property(env, obj, name, x);
  return obj;
}

static napi_value Spawn(napi_env env, napi_callback_info info) {
  size_t argc = 9;
  napi_value argv[9], result;
  uint32_t uid, gid;
  bool want_stdin;
  char *cwd = NULL;
  size_t cwd_len;
  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  struct child_args a;
  memset(&a, 0, sizeof a);
  a.failed_namespace = -1;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 7 || napi_get_value_string_utf8(env, argv[3], NULL, 0, &cwd_len) != napi_ok ||
      napi_get_value_uint32(env, argv[4], &uid) != napi_ok || napi_get_value_uint32(env, argv[5], &gid) != napi_ok ||
      napi_get_value_bool(env, argv[6], &want_stdin) != napi_ok) {
    napi_throw_type_error(env, NULL, "spawn(candidates, argv, envp, cwd, uid, gid, stdin[, fds[, namespaces]])");
    return NULL;
  }
  /* The child's descriptors: pipes at 0-2 (-1) unless given. */
  a.nfds = 3;
  a.fds[0] = a.fds[1] = a.fds[2] = -1;
  if (argc > 7) {
    uint32_t n;
    bool is_array = false;
    napi_is_array(env, argv[7], &is_array);
    if (!is_array || napi_get_array_length(env, argv[7], &n) != napi_ok || n < 3 || n > MAX_FDS) {
      napi_throw_type_error(env, NULL, "spawn: fds must be an array of 3 to 16 descriptors");
      return NULL;
    }
    for (uint32_t i = 0; i < n; i++) {
      napi_value v;
      if (napi_get_element(env, argv[7], i, &v) != napi_ok || napi_get_value_int32(env, v, &a.fds[i]) != napi_ok || a.fds[i] < (i < 3 ? -1 : 0)) {
        napi_throw_type_error(env, NULL, "spawn: fds must be descriptors (or -1 at 0, 1 and 2 for a pipe)");
        return NULL;
      }
    }
    a.nfds = (int)n;
  }
  a.candidates = strings(env, argv[0], "spawn: candidates must be strings");
  a.argv = a.candidates ? strings(env, argv[1], "spawn: argv must be strings") : NULL;
  a.envp = a.argv ? strings(env, argv[2], "spawn: envp must be strings") : NULL;
  a.namespaces = a.envp && argc > 8 ? strings(env, argv[8], "spawn: namespaces must be strings") : NULL;
  cwd = a.envp && (argc <= 8 || a.namespaces) ? malloc(cwd_len + 1) : NULL;
  if (!cwd) goto oom;
  {
    size_t argc = 0;
    while (a.argv[argc]) argc++;
    a.sh_argv = calloc(argc + 2, sizeof(char *));
    if (!a.sh_argv) goto oom;
    a.sh_argv[0] = "/bin/sh";
    for (size_t i = 1; i < argc; i++) a.sh_argv[i + 1] = a.argv[i];
  }
  napi_get_value_string_utf8(env, argv[3], cwd, cwd_len + 1, &cwd_len);
  a.cwd = cwd_len ? cwd : NULL;
  a.uid = uid;
  a.gid = gid;
  if (a.fds[0] < 0 && (want_stdin ? pipe2(in, O_CLOEXEC) : (in[0] = open("/dev/null", O_RDONLY | O_CLOEXEC))) < 0) goto sys;
  if ((a.fds[1] < 0 && pipe2(out, O_CLOEXEC) < 0) || (a.fds[2] < 0 && pipe2(err, O_CLOEXEC) < 0)) goto sys;
  if (a.fds[0] < 0) a.fds[0] = in[0];
  if (a.fds[1] < 0) a.fds[1] = out[1];
  if (a.fds[2] < 0) a.fds[2] = err[1];
  {
    sigset_t all;
    sigfillset(&all);
    /* No signal handler may run on the child's stack before it resets them. */
    pthread_sigmask(SIG_SETMASK, &all, &a.oldmask);
    pid_t pid = clone(child_main, stack + CHILD_STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
    int clone_errno = errno;
    pthread_sigmask(SIG_SETMASK, &a.oldmask, NULL);
    /* The child's ends (-1 where the caller gave the descriptor: it stays the caller's). */
    int child_ends[] = {in[0], out[1], err[1]}, own_ends[] = {in[1], out[0], err[0]};
    for (int i = 0; i < 3; i++)
      if (child_ends[i] >= 0) close(child_ends[i]);
    napi_create_object(env, &result);
    if (pid < 0 || a.error) {
      /* It never ran the command: reap it now. */
      if (pid >= 0)
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
      for (int i = 0; i < 3; i++)
        if (own_ends[i] >= 0) close(own_ends[i]);
      int_prop(env, result, "error", pid < 0 ? clone_errno : a.error);
      if (pid >= 0 && a.failed_namespace >= 0) int_prop(env, result, "namespace", a.failed_namespace);
    } else {
      int_prop(env, result, "pid", pid);
      if (in[1] >= 0) int_prop(env, result, "stdin", in[1]);
      if (out[0] >= 0) int_prop(env, result, "stdout", out[0]);
      if (err[0] >= 0) int_prop(env, result, "stderr", err[0]);
    }
  }
  free_args(&a, cwd);
  return result;
sys:
  {
    int e = errno;
    int fds[] = {in[0], in[1], out[0], out[1], err[0], err[1]};
    for (int i = 0; i < 6; i++)
      if (fds[i] >= 0) close(fds[i]);
    free_args(&a, cwd);
    napi_create_object(env, &result);
    return int_prop(env, result, "error", e);
  }
oom:
  free_args(&a, cwd);
  {
    bool pending = false;
    napi_is_exception_pending(env, &pending);
    if (!pending) napi_throw_error(env, "ENOMEM", "spawn: out of memory");
  }
  return NULL;
}

struct write_args {
  char **namespaces;
  const char *path;
  const char *data;
  size_t len;
  volatile int failed_namespace;
  volatile int error;
};

/* Raw system calls only, as child_main (it runs on the caller's memory); every signal stays
 * blocked (the caller's mask while it clones), so no handler of the caller's runs here. */
static int write_main(void *p) {
  struct write_args *a = p;
  int fd;
  long n;
  if (join_namespaces(a->namespaces, &a->failed_namespace) < 0 ||
      (fd = syscall(SYS_openat, AT_FDCWD, a->path, O_WRONLY | O_TRUNC | O_CLOEXEC)) < 0) {
    a->error = errno;
    syscall(SYS_exit_group, 1);
  }
  n = syscall(SYS_write, fd, a->data, a->len);
  if (n < 0) a->error = errno;
  else if ((size_t)n != a->len) a->error = EIO;
  syscall(SYS_close, fd);
  syscall(SYS_exit_group, a->error ? 1 : 0);
  return 0;
}

/* Runs fn(arg) in a child on the caller's memory, every signal blocked, and reaps it: -1 and errno when it could not be cloned. */
static int run_child(int (*fn)(void *), void *arg) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = clone(fn, stack + CHILD_STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, arg);
  int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (pid < 0) {
    errno = clone_errno;
    return -1;
  }
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
  return 0;
}

struct netns_args {
  const char *path;
  volatile int error;
};

/* /proc/self is the child's own: it is a process of its own (no CLONE_THREAD). */
static int netns_main(void *p) {
  struct netns_args *a = p;
  if (syscall(SYS_unshare, CLONE_NEWNET) < 0 || syscall(SYS_mount, "/proc/self/ns/net", a->path, "none", MS_BIND, NULL) < 0) a->error = errno;
  syscall(SYS_exit_group, a->error ? 1 : 0);
  return 0;
}

static napi_value NetnsAdd(napi_env env, napi_callback_info info) {
  size_t argc = 1, len;
  napi_value argv[1], result;
  struct netns_args a = {NULL, 0};
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 1 || napi_get_value_string_utf8(env, argv[0], NULL, 0, &len) != napi_ok) {
    napi_throw_type_error(env, NULL, "netnsAdd(path)");
    return NULL;
  }
  char *path = malloc(len + 1);
  if (!path) {
    napi_throw_error(env, "ENOMEM", "netnsAdd: out of memory");
    return NULL;
  }
  napi_get_value_string_utf8(env, argv[0], path, len + 1, &len);
  a.path = path;
  int e = run_child(netns_main, &a) < 0 ? errno : a.error;
  free(path);
  if (!e) {
    napi_create_int32(env, 0, &result);
    return result;
  }
  napi_create_object(env, &result);
  return int_prop(env, result, "error", e);
}

static napi_value WriteIn(napi_env env, napi_callback_info info) {
  size_t argc = 3, path_len, data_len;
  napi_value argv[3], result;
  char *path = NULL, *data = NULL;
  struct write_args a;
  memset(&a, 0, sizeof a);
  a.failed_namespace = -1;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 3 || napi_get_value_string_utf8(env, argv[1], NULL, 0, &path_len) != napi_ok ||
      napi_get_value_string_utf8(env, argv[2], NULL, 0, &data_len) != napi_ok) {
    napi_throw_type_error(env, NULL, "writeIn(namespaces, path, content)");
    return NULL;
  }
  a.namespaces = strings(env, argv[0], "writeIn: namespaces must be strings");
  path = a.namespaces ? malloc(path_len + 1) : NULL;
  data = path ? malloc(data_len + 1) : NULL;
  if (!data) {
    free_strings(a.namespaces);
    free(path);
    bool pending = false;
    napi_is_exception_pending(env, &pending);
    if (!pending) napi_throw_error(env, "ENOMEM", "writeIn: out of memory");
    return NULL;
  }
  napi_get_value_string_utf8(env, argv[1], path, path_len + 1, &path_len);
  napi_get_value_string_utf8(env, argv[2], data, data_len + 1, &data_len);
  a.path = path;
  a.data = data;
  a.len = data_len;
  int cloned = run_child(write_main, &a), e = cloned < 0 ? errno : a.error;
  free_strings(a.namespaces);
  free(path);
  free(data);
  if (!e) {
    napi_create_int32(env, 0, &result);
    return result;
  }
  napi_create_object(env, &result);
  int_prop(env, result, "error", e);
  if (cloned == 0 && a.failed_namespace >= 0) int_prop(env, result, "namespace", a.failed_namespace);
  return result;
}

/* Where netlinkIn's child puts the replies (the caller is suspended meanwhile, one child at a time). */
#define NL_REPLIES_MAX (256 * 1024)
static char nl_replies[NL_REPLIES_MAX];

/* The descriptor of netlinkIn's files[0] in its child (node/network/netlink.ts NETLINK_FILES_FD). */
#define NETLINK_FILES_FD 100

struct netlink_args {
  char **namespaces;
  char **files;
  volatile int failed_file;
  int protocol;
  const void *request;
  size_t len;
  volatile size_t got;
  volatile int failed_namespace;
  volatile int error;
};

static int netlink_main(void *p) {
  struct netlink_args *a = p;
  int one = 1, fd;
  struct sockaddr_nl kernel;
  memset(&kernel, 0, sizeof kernel);
  kernel.nl_family = AF_NETLINK;
  /* Opened before the namespaces are joined: paths are the caller's. The child's descriptor
   * table is its own copy (no CLONE_FILES), so these never reach the caller's. */
  for (int i = 0; a->files && a->files[i]; i++) {
    int f = syscall(SYS_openat, AT_FDCWD, a->files[i], O_RDONLY | O_CLOEXEC);
    if (f < 0 || syscall(SYS_dup3, f, NETLINK_FILES_FD + i, O_CLOEXEC) < 0) {
      a->failed_file = i;
      goto fail;
    }
    syscall(SYS_close, f);
  }
  if (join_namespaces(a->namespaces, &a->failed_namespace) < 0) goto fail;
  if ((fd = syscall(SYS_socket, AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, a->protocol)) < 0) goto fail;
  /* Errors echo only the failed message's header, with the kernel's reason (extended ack). */
  syscall(SYS_setsockopt, fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one);
  syscall(SYS_setsockopt, fd, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof one);
  if (syscall(SYS_sendto, fd, a->request, a->len, 0, &kernel, sizeof kernel) < 0) goto fail;
  for (;;) {
    long n = syscall(SYS_recvfrom, fd, nl_replies + a->got, NL_REPLIES_MAX - a->got, MSG_DONTWAIT, NULL, NULL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN) goto fail;
    if (n <= 0) break;
    a->got += (size_t)n;
    if (NL_REPLIES_MAX - a->got < 16384) {
      errno = ENOBUFS;
      goto fail;
    }
  }
  syscall(SYS_exit_group, 0);
  return 0;
fail:
  a->error = errno;
  syscall(SYS_exit_group, 1);
  return 0;
}

static napi_value NetlinkIn(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4], result;
  struct netlink_args a;
  void *data;
  bool is_buffer = false;
  memset(&a, 0, sizeof a);
  a.failed_namespace = -1;
  a.failed_file = -1;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 3 || napi_get_value_int32(env, argv[1], &a.protocol) != napi_ok || napi_is_buffer(env, argv[2], &is_buffer) != napi_ok || !is_buffer ||
      napi_get_buffer_info(env, argv[2], &data, &a.len) != napi_ok) {
    napi_throw_type_error(env, NULL, "netlinkIn(namespaces, protocol, request: Buffer[, files])");
    return NULL;
  }
  a.request = data;
  a.namespaces = strings(env, argv[0], "netlinkIn: namespaces must be strings");
  if (a.namespaces && argc > 3 && !(a.files = strings(env, argv[3], "netlinkIn: files must be strings"))) {
    free_strings(a.namespaces);
    a.namespaces = NULL;
  }
  if (!a.namespaces) {
    bool pending = false;
    napi_is_exception_pending(env, &pending);
    if (!pending) napi_throw_error(env, "ENOMEM", "netlinkIn: out of memory");
    return NULL;
  }
  int cloned = run_child(netlink_main, &a), e = cloned < 0 ? errno : a.error;
  free_strings(a.namespaces);
  free_strings(a.files);
  if (!e) {
    napi_create_buffer_copy(env, a.got, nl_replies, NULL, &result);
    return result;
  }
  napi_create_object(env, &result);
  int_prop(env, result, "error", e);
  if (cloned == 0 && a.failed_namespace >= 0) int_prop(env, result, "namespace", a.failed_namespace);
  if (cloned == 0 && a.failed_file >= 0) int_prop(env, result, "file", a.failed_file);
  return result;
}

static napi_value Wait(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], result;
  int32_t pid = 0;
  int status = 0;
  pid_t r;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 1 || napi_get_value_int32(env, argv[0], &pid) != napi_ok || pid <= 0) {
    napi_throw_type_error(env, NULL, "wait(pid): pid must be a positive integer");
    return NULL;
  }
  do {
    r = waitpid((pid_t)pid, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return NULL;
  napi_create_object(env, &result);
  if (r < 0) return int_prop(env, result, "error", errno);
  if (WIFSIGNALED(status)) return int_prop(env, result, "signal", WTERMSIG(status));
  return int_prop(env, result, "code", WEXITSTATUS(status));
}

static napi_value Init(napi_env env, napi_value exports) {
  napi_value fn;
  napi_create_function(env, "spawn", NAPI_AUTO_LENGTH, Spawn, NULL, &fn);
  napi_set_named_property(env, exports, "spawn", fn);
  napi_create_function(env, "wait", NAPI_AUTO_LENGTH, Wait, NULL, &fn);
  napi_set_named_property(env, exports, "wait", fn);
  napi_create_function(env, "writeIn", NAPI_AUTO_LENGTH, WriteIn, NULL, &fn);
  napi_set_named_property(env, exports, "writeIn", fn);
  napi_create_function(env, "netnsAdd", NAPI_AUTO_LENGTH, NetnsAdd, NULL, &fn);
  napi_set_named_property(env, exports, "netnsAdd", fn);
  napi_create_function(env, "netlinkIn", NAPI_AUTO_LENGTH, NetlinkIn, NULL, &fn);
  napi_set_named_property(env, exports, "netlinkIn", fn);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, Init)
