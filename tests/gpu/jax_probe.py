"""JAX through rgpu (issue 13's acceptance): jax.jit of a small MLP training step, losses printed exactly so the
native run and the run through `rgpu run` can be compared byte for byte.
    python3 tests/gpu/jax_probe.py            (natively)
    rgpu run -- python3 tests/gpu/jax_probe.py
"""

import jax
import jax.numpy as jnp

print("devices:", [d.platform for d in jax.devices()])
key = jax.random.PRNGKey(0)
k1, k2, k3, k4 = jax.random.split(key, 4)
params = {"w1": jax.random.normal(k1, (64, 128)) * 0.1, "b1": jnp.zeros(128),
          "w2": jax.random.normal(k2, (128, 10)) * 0.1, "b2": jnp.zeros(10)}
x = jax.random.normal(k3, (256, 64))
y = jax.random.randint(k4, (256,), 0, 10)


def loss_fn(p, x, y):
    h = jax.nn.relu(x @ p["w1"] + p["b1"])
    logits = h @ p["w2"] + p["b2"]
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


@jax.jit
def step(p, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
    return jax.tree_util.tree_map(lambda a, g: a - 0.1 * g, p, grads), loss


for i in range(20):
    params, loss = step(params, x, y)
    print(f"step {i} loss {float(loss)!r}")
print("checksum", repr(float(sum(jnp.sum(v) for v in params.values()))))
