/* anygrad._fast: the one call ctypes makes too slow, Tensor.item(), as a
 * CPython function. Optional: setup.py builds it when a compiler and
 * Python.h are present, and the package falls back to ctypes without it.
 * It does not link libanygrad: the package hands it the address of
 * ag_item_scalar (resolved by ctypes) once, through bind(). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* Mirrors include/anygrad/tensor.h: ag_item_value (ag_dtype is an int
 * enum; AG_BOOL is 6). */
typedef struct item_value {
  int dtype;
  int32_t is_floating;
  double f;
  int64_t i;
} item_value;
typedef int (*item_fn)(const void *t, item_value *out);

static item_fn g_item; /* written once by bind(), under the GIL */

static PyObject *fast_bind(PyObject *self, PyObject *arg) {
  (void)self;
  void *p = PyLong_AsVoidPtr(arg);
  if (!p) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "anygrad._fast.bind: NULL function");
    return NULL;
  }
  g_item = (item_fn)p;
  Py_RETURN_NONE;
}

/* item(handle) -> float, int or bool; None when the call failed, with the
 * library's error left pending for the caller to raise (never cleared or
 * retried here: a sync that reported an error a kernel found on the device
 * has consumed it, and a second call would return the kernel's value). The
 * GIL is released around the call: it may wait for the device. */
static PyObject *fast_item(PyObject *self, PyObject *arg) {
  (void)self;
  if (!g_item) Py_RETURN_NONE;
  void *h = PyLong_AsVoidPtr(arg);
  if (!h) {
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  item_value v;
  int st;
  Py_BEGIN_ALLOW_THREADS
  st = g_item(h, &v);
  Py_END_ALLOW_THREADS
  if (st != 0) Py_RETURN_NONE;
  if (v.is_floating) return PyFloat_FromDouble(v.f);
  if (v.dtype == 6) return PyBool_FromLong(v.i != 0);
  return PyLong_FromLongLong((long long)v.i);
}

static PyMethodDef k_methods[] = {
    {"bind", fast_bind, METH_O, "bind(address of ag_item_scalar)"},
    {"item", fast_item, METH_O, "item(tensor handle) -> value, or None on failure"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef k_module = {PyModuleDef_HEAD_INIT, "_fast", NULL, -1, k_methods,
                                      NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fast(void) { return PyModule_Create(&k_module); }
