/*
 * ptab.c — the directories -o sep makes out of key prefixes: a table of
 * (scope, prefix) by id, each kept while the kernel holds its inode (its
 * lookup count), and holding its scope's slot meanwhile (state.h).
 * FUSE-free.
 */
#include "state.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct pnode {
	uint64_t id;
	uint64_t nlookup;
	scope sc;
	size_t plen;
	struct pnode *next_key, *next_id;
	uint8_t prefix[];
} pnode;

#define PTAB_SIZE 4096
static struct {
	pthread_mutex_t lock;
	pnode *by_key[PTAB_SIZE], *by_id[PTAB_SIZE];
	uint64_t next_id;
} P = {.lock = PTHREAD_MUTEX_INITIALIZER, .next_id = 1};

static size_t ptab_hash(scope sc, const uint8_t *p, size_t n)
{
	uint64_t h = 1469598103934665603u ^ (sc.id * 2 + sc.view);
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211u;
	return (size_t)(h % PTAB_SIZE);
}

/* A directory of segments/NAME holds its segment; one of view/ follows
 * the current snapshot. */
static void scope_ref(scope sc, int64_t d)
{
	if (!sc.view)
		d > 0 ? slot_ref(slot_get(sc.id), 1)
		      : slot_unref(slot_get(sc.id), 1);
}

uint64_t ptab_ref(scope sc, const uint8_t *prefix, size_t plen)
{
	size_t h = ptab_hash(sc, prefix, plen);
	pthread_mutex_lock(&P.lock);
	pnode *n = P.by_key[h];
	while (n && !(n->sc.view == sc.view && n->sc.id == sc.id &&
	              n->plen == plen && memcmp(n->prefix, prefix, plen) == 0))
		n = n->next_key;
	if (!n && (n = malloc(sizeof *n + plen))) {
		n->id = P.next_id++;
		n->nlookup = 0;
		n->sc = sc;
		n->plen = plen;
		memcpy(n->prefix, prefix, plen);
		n->next_key = P.by_key[h];
		P.by_key[h] = n;
		n->next_id = P.by_id[n->id % PTAB_SIZE];
		P.by_id[n->id % PTAB_SIZE] = n;
		scope_ref(sc, 1); /* the directory holds its scope */
	}
	uint64_t ino = 0;
	if (n) {
		n->nlookup++;
		ino = make_ino(K_PREFIX, n->id);
	}
	pthread_mutex_unlock(&P.lock);
	return ino;
}

void ptab_forget(uint64_t id, uint64_t count)
{
	pthread_mutex_lock(&P.lock);
	pnode **pp = &P.by_id[id % PTAB_SIZE];
	while (*pp && (*pp)->id != id)
		pp = &(*pp)->next_id;
	pnode *n = *pp;
	if (n && (n->nlookup = n->nlookup > count ? n->nlookup - count : 0) == 0) {
		*pp = n->next_id;
		pnode **kp = &P.by_key[ptab_hash(n->sc, n->prefix, n->plen)];
		while (*kp != n)
			kp = &(*kp)->next_key;
		*kp = n->next_key;
	} else {
		n = NULL;
	}
	pthread_mutex_unlock(&P.lock);
	if (n) {
		scope_ref(n->sc, -1);
		free(n);
	}
}

int ptab_get(uint64_t id, scope *sc, uint8_t **prefix, size_t *plen)
{
	int err = ENOENT;
	pthread_mutex_lock(&P.lock);
	pnode *n = P.by_id[id % PTAB_SIZE];
	while (n && n->id != id)
		n = n->next_id;
	if (n && (*prefix = malloc(n->plen ? n->plen : 1))) {
		memcpy(*prefix, n->prefix, n->plen);
		*plen = n->plen;
		*sc = n->sc;
		err = 0;
	} else if (n) {
		err = ENOMEM;
	}
	pthread_mutex_unlock(&P.lock);
	return err;
}

void ptab_free_all(void)
{
	for (size_t i = 0; i < PTAB_SIZE; i++) {
		pnode *n = P.by_id[i];
		while (n) {
			pnode *next = n->next_id;
			free(n);
			n = next;
		}
		P.by_id[i] = P.by_key[i] = NULL;
	}
}

