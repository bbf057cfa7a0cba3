/* A random pointer walk over MIB MiB (default 256) of 64-byte nodes: a random cycle
 * through every node, walked STEPS times the node count (default 2) in the cycle's
 * order, then one pass over the nodes in address order; prints a checksum of both (the
 * same under any swap). A graph walk's memory access: every step a cache and TLB miss,
 * and under swap a page fault on a page chosen at random. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct node {
    struct node *next;
    uint64_t value;
    uint64_t pad[6];
};

static uint64_t xorshift(uint64_t *state) {
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoul(argv[1], 0, 10) : 256;
    size_t steps = argc > 2 ? strtoul(argv[2], 0, 10) : 2;
    size_t count = (mib << 20) / sizeof(struct node);
    struct node *nodes = malloc(count * sizeof(struct node));
    size_t *order = malloc(count * sizeof(size_t));
    if (!nodes || !order) return 2;
    uint64_t seed = 88172645463325252ull;
    for (size_t i = 0; i < count; i++) order[i] = i;
    for (size_t i = count - 1; i > 0; i--) {
        size_t j = xorshift(&seed) % (i + 1);
        size_t t = order[i]; order[i] = order[j]; order[j] = t;
    }
    for (size_t i = 0; i < count; i++) {
        nodes[order[i]].next = &nodes[order[(i + 1) % count]];
        nodes[order[i]].value = xorshift(&seed);
    }
    free(order);
    uint64_t sum = 0;
    struct node *at = &nodes[0];
    for (size_t i = 0; i < steps * count; i++) {
        sum = sum * 31 + at->value;
        at = at->next;
    }
    uint64_t pass = 0;
    for (size_t i = 0; i < count; i++) pass += nodes[i].value >> 3;
    printf("%zu nodes, walk %llx, pass %llx\n", count, (unsigned long long)sum, (unsigned long long)pass);
    return 0;
}
