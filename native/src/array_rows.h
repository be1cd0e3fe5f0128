/* A run of bytes through a CUDA array's rows (its width of elements each), as the 1D array copies of the driver and
 * the runtime name them: from (x, y) on, the rest of that row, then whole rows, then the start of the last. Shared
 * by libcuda (arrays.c) and libcudart (cudart/arrays.c), which send each piece as one 2D copy. */
#ifndef RGPU_ARRAY_ROWS_H
#define RGPU_ARRAY_ROWS_H

#include <stddef.h>

struct array_piece {
    size_t x, y, width, rows;
};

/* The next piece of `left` bytes from (x, y) of rows `row` bytes long (row > 0, x < row). */
static inline struct array_piece array_next_piece(size_t row, size_t x, size_t y, size_t left)
{
    struct array_piece p = {x, y, x ? row - x : row, 1};
    if (left < p.width)
        p.width = left;
    else if (!x)
        p.rows = left / row;
    return p;
}

/* Where the piece after `p` starts. */
static inline void array_after_piece(size_t row, const struct array_piece *p, size_t *x, size_t *y)
{
    *x = (p->x + p->width) % row;
    *y = p->y + (*x ? 0 : p->rows);
}

#endif
