/*
 * merge_tree.h — the loser tree of every N-input loop: a tournament whose
 * inner nodes keep the loser of each match (tree[0] the winner, tree[1 ..
 * n) the losers), so that replacing the winner costs one path of log2 N
 * matches. The loops differ only in their match (a constant function, so
 * each instance is specialized): the general loop's compares the cursors
 * (merge_general.c), the engines' their in-line inputs.
 */
#ifndef KVSEG_MERGE_TREE_H
#define KVSEG_MERGE_TREE_H

#include "merge_internal.h"

/*
 * Input i's record changed: replays its path to the root, with match_in
 * (does input x's record come before y's?); build (a constant) while the
 * tree is built, its nodes EMPTY until then. In the in-line loops, the
 * matches first compare the inputs' LCPs with the last output key, which
 * decide unless they are equal: an input that has ended has an LCP of 0
 * (tin_next_slow, bin_next_slow), so that it loses to any input with more
 * and only a tie looks at live[].
 */
static SPECIALIZED void
tree_replay(merge *m, void *in, const bool *live, size_t i, bool build,
            bool (*match_in)(void *, const bool *, size_t, size_t))
{
	size_t winner = i, *tree = m->tree; /* each node read once */
	for (size_t node = (m->n + i) / 2; node >= 1; node /= 2) {
		size_t t = tree[node];
		if (build && t == EMPTY) {
			tree[node] = winner;
			return;
		}
		if (match_in(in, live, t, winner)) {
			tree[node] = winner;
			winner = t;
		}
	}
	tree[0] = winner;
}

#endif
