/*
 * mountpoint.c — can segfs mount there? The checks of MOUNTPOINT made
 * before SEGDIR is opened (cmdline.h), each refusal one line on stderr.
 *
 * The kernel would accept more than makes sense: a regular file as mount
 * point (libfuse then tells the kernel the root is a file, and every
 * access gives EIO), a second segfs over a first (which hides it), or a
 * mount point that is SEGDIR or above it (segfs would hide SEGDIR from
 * itself, and its next look at SEGDIR would be a request to itself, which
 * it would wait for forever).
 */
#include "cmdline.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/*
 * Is the directory path (absolute, without symbolic links) mountpoint
 * itself or below it?
 */
static bool covers(const char *mountpoint, const char *path)
{
	char *m = realpath(mountpoint, NULL);
	if (!m)
		return false;
	size_t n = strlen(m);
	bool below = strncmp(m, path, n) == 0 &&
	             (path[n] == '\0' || path[n] == '/' || m[n - 1] == '/');
	free(m);
	return below;
}

/* Decodes mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *s)
{
	char *o = s;
	for (char *p = s; *p; p++) {
		if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' &&
		    p[2] <= '7' && p[3] >= '0' && p[3] <= '7') {
			*o++ = (char)((p[1] - '0') << 6 | (p[2] - '0') << 3 |
			              (p[3] - '0'));
			p += 3;
		} else {
			*o++ = *p;
		}
	}
	*o = '\0';
}

/*
 * The source of the topmost mount at the absolute path real when it is a
 * segfs (type fuse.segfs), malloc'd; else NULL. From
 * /proc/self/mountinfo: "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS
 * [OPTIONAL...] - FSTYPE SOURCE SUPER", later lines mounted later.
 */
static char *segfs_mounted_at(const char *real)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return NULL;
	char *line = NULL, *found = NULL;
	size_t cap = 0;
	while (getline(&line, &cap, f) > 0) {
		char *save, *field[5] = {0};
		char *tok = strtok_r(line, " \n", &save);
		for (int i = 0; tok && i < 5; i++) {
			field[i] = tok;
			tok = i < 4 ? strtok_r(NULL, " \n", &save) : tok;
		}
		if (!field[4])
			continue;
		unescape(field[4]);
		if (strcmp(field[4], real) != 0)
			continue;
		char *type = NULL, *source = NULL;
		while ((tok = strtok_r(NULL, " \n", &save)))
			if (!strcmp(tok, "-")) {
				type = strtok_r(NULL, " \n", &save);
				source = strtok_r(NULL, " \n", &save);
				break;
			}
		free(found); /* a later mount there covers it */
		found = NULL;
		if (type && !strcmp(type, "fuse.segfs")) {
			found = strdup(source ? source : "?");
			if (found)
				unescape(found);
		}
	}
	free(line);
	fclose(f);
	return found;
}

int mountpoint_check(const char *mnt, const char *segdir)
{
	struct stat sb;
	if (stat(mnt, &sb) < 0) {
		fprintf(stderr, "segfs: the mount point %s: %s\n", mnt,
		        strerror(errno));
		return EXIT_MOUNT_FAILED;
	}
	if (!S_ISDIR(sb.st_mode)) {
		fprintf(stderr,
		        "segfs: the mount point %s is not a directory\n", mnt);
		return EXIT_MOUNT_FAILED;
	}
	char *real = realpath(mnt, NULL);
	char *other = real ? segfs_mounted_at(real) : NULL;
	free(real);
	if (other) {
		fprintf(stderr,
		        "segfs: a segfs of %s is mounted at %s already: "
		        "unmount it first (fusermount3 -u %s)\n",
		        other, mnt, mnt);
		free(other);
		return EXIT_MOUNT_FAILED;
	}
	if (covers(mnt, segdir)) {
		fprintf(stderr,
		        "segfs: the mount point %s would hide %s, which it "
		        "shows: mount it elsewhere\n",
		        mnt, segdir);
		return EXIT_USAGE;
	}
	return 0;
}
