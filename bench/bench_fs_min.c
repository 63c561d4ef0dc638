/*
 * bench_fs_min — the minimal FUSE filesystem, the peer of segfs in the
 * cat-latency benchmark (bench_fs_cat, bench/README.md "segfs").
 *
 *   bench_fs_min [-f] [-d] [-o mt] [-o size=N] MOUNTPOINT
 *
 * On the libfuse3 low-level API, with the options segfs uses: every name
 * in the root directory (1..255 bytes) is a read-only regular file whose
 * contents are the same N bytes (default 16, "0123456789abcdef" repeated),
 * so the random keys of the benchmark all resolve here without a table;
 * each name gets its own inode number (a 64-bit FNV-1a hash of the name),
 * as each key of segfs does, so the kernel caches one dentry, one inode and
 * one page per name, as it does for segfs and tmpfs. open replies ENOSYS
 * (the kernel's no-open support: no open or release requests), entry and
 * attribute timeouts are one year, -odefault_permissions, and the loop is
 * single-threaded unless -o mt. The root directory lists only "." and "..".
 * It daemonizes unless -f, like any libfuse program; fusermount3 -u
 * unmounts it.
 *
 * It does no work of its own on the request path beyond hashing the name,
 * so what it costs is the FUSE round trip: the floor segfs is measured
 * against.
 */
#define FUSE_USE_VERSION 312

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TIMEOUT (365.0 * 86400)
#define MAX_SIZE 65536

static char contents[MAX_SIZE];
static size_t size = 16;
static struct timespec mount_time;

/* Regular files get odd inode numbers above 1; the root is 1. */
static fuse_ino_t name_ino(const char *name)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 0x100000001b3ull;
	h |= 1;
	return (fuse_ino_t)(h == 1 ? 3 : h);
}

static void fill_attr(fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof *st);
	st->st_ino = ino;
	if (ino == FUSE_ROOT_ID) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
	} else {
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = (off_t)size;
		st->st_blocks = (blkcnt_t)((size + 511) / 512);
	}
	st->st_blksize = 4096;
	st->st_atim = st->st_mtim = st->st_ctim = mount_time;
}

static void min_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	if (parent != FUSE_ROOT_ID) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	struct fuse_entry_param e;
	memset(&e, 0, sizeof e);
	e.ino = name_ino(name);
	e.generation = 1;
	e.attr_timeout = TIMEOUT;
	e.entry_timeout = TIMEOUT;
	fill_attr(e.ino, &e.attr);
	fuse_reply_entry(req, &e);
}

static void min_getattr(fuse_req_t req, fuse_ino_t ino,
                        struct fuse_file_info *fi)
{
	(void)fi;
	struct stat st;
	fill_attr(ino, &st);
	fuse_reply_attr(req, &st, TIMEOUT);
}

static void min_open(fuse_req_t req, fuse_ino_t ino,
                     struct fuse_file_info *fi)
{
	(void)ino;
	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		fuse_reply_err(req, EROFS);
		return;
	}
	fuse_reply_err(req, ENOSYS); /* no-open, as segfs */
}

static void min_read(fuse_req_t req, fuse_ino_t ino, size_t n, off_t off,
                     struct fuse_file_info *fi)
{
	(void)fi;
	if (ino == FUSE_ROOT_ID) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	size_t o = off < 0 ? 0 : (size_t)off < size ? (size_t)off : size;
	fuse_reply_buf(req, contents + o, size - o < n ? size - o : n);
}

static void min_opendir(fuse_req_t req, fuse_ino_t ino,
                        struct fuse_file_info *fi)
{
	if (ino != FUSE_ROOT_ID) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	fi->cache_readdir = 1;
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

static void min_readdir(fuse_req_t req, fuse_ino_t ino, size_t n, off_t off,
                        struct fuse_file_info *fi)
{
	(void)fi;
	char buf[256];
	size_t len = 0;
	struct stat st;
	fill_attr(ino, &st);
	if (off < 1) {
		size_t e = fuse_add_direntry(req, buf, sizeof buf, ".", &st, 1);
		len += e;
	}
	if (off < 2) {
		size_t e = fuse_add_direntry(req, buf + len, sizeof buf - len,
		                             "..", &st, 2);
		len += e;
	}
	fuse_reply_buf(req, buf, len < n ? len : 0);
}

static const struct fuse_lowlevel_ops min_ops = {
	.lookup = min_lookup,
	.getattr = min_getattr,
	.open = min_open,
	.read = min_read,
	.opendir = min_opendir,
	.readdir = min_readdir,
};

struct cli {
	int mt;
	int size;
};

static const struct fuse_opt cli_opts[] = {
	{"mt", offsetof(struct cli, mt), 1},
	{"size=%d", offsetof(struct cli, size), 0},
	FUSE_OPT_END,
};

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct cli cli = {.mt = 0, .size = 16};
	struct fuse_cmdline_opts opts;
	int ret = 1;

	if (fuse_opt_parse(&args, &cli, cli_opts, NULL) != 0)
		return 2;
	if (fuse_parse_cmdline(&args, &opts) != 0) {
		fuse_opt_free_args(&args);
		return 2;
	}
	if (opts.show_help || opts.show_version) {
		printf("usage: %s [-f] [-d] [-o mt] [-o size=N] MOUNTPOINT\n",
		       argv[0]);
		fuse_cmdline_help();
		ret = 0;
		goto out_args;
	}
	if (!opts.mountpoint || cli.size < 0 || cli.size > MAX_SIZE) {
		fprintf(stderr, "usage: %s [-f] [-d] [-o mt] [-o size=0..%d] "
		                "MOUNTPOINT\n",
		        argv[0], MAX_SIZE);
		ret = 2;
		goto out_args;
	}
	size = (size_t)cli.size;
	for (size_t i = 0; i < size; i++)
		contents[i] = "0123456789abcdef"[i % 16];
	clock_gettime(CLOCK_REALTIME, &mount_time);

	fuse_opt_add_arg(&args, "-odefault_permissions");
	struct fuse_session *se =
	    fuse_session_new(&args, &min_ops, sizeof min_ops, NULL);
	if (!se)
		goto out_args;
	if (fuse_set_signal_handlers(se) != 0)
		goto out_session;
	if (fuse_session_mount(se, opts.mountpoint) != 0)
		goto out_signals;
	fuse_daemonize(opts.foreground);
	if (!cli.mt || opts.singlethread) {
		ret = fuse_session_loop(se);
	} else {
		struct fuse_loop_config *cfg = fuse_loop_cfg_create();
		fuse_loop_cfg_set_clone_fd(cfg, (unsigned)opts.clone_fd);
		fuse_loop_cfg_set_max_threads(cfg, opts.max_threads);
		ret = fuse_session_loop_mt(se, cfg);
		fuse_loop_cfg_destroy(cfg);
	}
	ret = ret < 0 ? 1 : 0;
	fuse_session_unmount(se);
out_signals:
	fuse_remove_signal_handlers(se);
out_session:
	fuse_session_destroy(se);
out_args:
	free(opts.mountpoint);
	fuse_opt_free_args(&args);
	return ret;
}
