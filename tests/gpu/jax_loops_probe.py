"""JAX control flow through rgpu: loops and branches that XLA may turn into CUDA graph conditional nodes (WHILE,
IF/SWITCH) and into traced command buffers (cuStreamBeginCaptureToGraph for cuBLAS inside a loop). Values are
printed exactly, so the native run and the run through `rgpu run` compare byte for byte.
    python3 tests/gpu/jax_loops_probe.py            (natively)
    rgpu run -- python3 tests/gpu/jax_loops_probe.py
"""

import jax
import jax.numpy as jnp
from jax import lax

print("devices:", [d.platform for d in jax.devices()])
key = jax.random.PRNGKey(1)
k1, k2 = jax.random.split(key)
w = jax.random.normal(k1, (64, 64)) * 0.05
x0 = jax.random.normal(k2, (32, 64))


@jax.jit
def dynamic_while(x, n):
    # a trip count known only on the device: a WHILE loop
    def body(c):
        i, v = c
        return i + 1, jnp.tanh(v @ w) + 0.01 * i

    return lax.while_loop(lambda c: c[0] < n, body, (0, x))[1]


@jax.jit
def fixed_scan(x):
    def body(v, k):
        v = jnp.tanh(v @ w + k)
        return v, jnp.sum(v)

    return lax.scan(body, x, jnp.arange(12, dtype=jnp.float32) * 0.1)


@jax.jit
def branches(x, which):
    return lax.switch(which, [lambda v: v @ w, lambda v: jnp.sin(v) @ w, lambda v: jnp.exp(-v * v)], x)


@jax.jit
def cond_in_loop(x):
    def body(i, v):
        return lax.cond(i % 3 == 0, lambda u: jnp.tanh(u @ w), lambda u: u * 0.9, v)

    return lax.fori_loop(0, 10, body, x)


def show(name, a):
    a = jax.device_get(a)
    print(name, repr(float(jnp.sum(a))), repr(float(jnp.sum(a * a))))


for n in (0, 1, 7):
    show(f"while n={n}", dynamic_while(x0, n))
v, sums = fixed_scan(x0)
show("scan", v)
print("scan sums", [repr(float(s)) for s in jax.device_get(sums)])
for k in range(3):
    show(f"switch {k}", branches(x0, k))
show("cond in loop", cond_in_loop(x0))
