// torch_neuronx._mx_numpy: NumPy element types for NKI's MX packed types
// (float8_e4m3fn_x4, float8_e5m2_x4: four fp8 values in 32 bits;
// float4_e2m1fn_x4: four fp4 values in 16 bits), so that NumPy arrays of
// them are what NKI's own tooling passes: `str(a.dtype) ==
// "float8_e4m3fn_x4"`, 4 (2) bytes an element, `a.view(np.uint32)` (uint16)
// gives the containers. They take no arithmetic and no casts (an element is
// four numbers): NumPy moves their bits (copies, views, concatenation).
// Registered as NumPy user types (the legacy API ml_dtypes uses too); no
// torch dependency.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define NPY_NO_DEPRECATED_API NPY_2_0_API_VERSION
#include <numpy/arrayobject.h>
#include <numpy/ndarraytypes.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {

constexpr int kTypes = 3;

struct MxScalar {
  PyObject_HEAD uint8_t bits[4];
};

struct MxType {
  const char* name;     // NKI's name (the type's __name__)
  const char* tp_name;  // module-qualified
  int size;             // bytes an element
  PyTypeObject type;
  PyArray_ArrFuncs funcs;
  PyArray_DescrProto proto;
  int typenum;
};

MxType g_types[kTypes] = {
    {"float8_e4m3fn_x4",
     "torch_neuronx._mx_numpy.float8_e4m3fn_x4",
     4,
     {},
     {},
     {},
     -1},
    {"float8_e5m2_x4",
     "torch_neuronx._mx_numpy.float8_e5m2_x4",
     4,
     {},
     {},
     {},
     -1},
    {"float4_e2m1fn_x4",
     "torch_neuronx._mx_numpy.float4_e2m1fn_x4",
     2,
     {},
     {},
     {},
     -1},
};

MxType* typeOfScalar(PyObject* o) {
  for (auto& t : g_types)
    if (PyObject_TypeCheck(o, &t.type)) return &t;
  return nullptr;
}

MxType* typeOfArray(void* arr) {
  PyArray_Descr* d = PyArray_DESCR(static_cast<PyArrayObject*>(arr));
  for (auto& t : g_types)
    if (d->type_num == t.typenum) return &t;
  return nullptr;
}

uint64_t containerValue(const uint8_t* b, int size) {
  uint64_t v = 0;
  std::memcpy(&v, b, size);  // little-endian containers
  return v;
}

PyObject* scalarNew(MxType* t, const void* bits) {
  PyObject* o = t->type.tp_alloc(&t->type, 0);
  if (o) std::memcpy(reinterpret_cast<MxScalar*>(o)->bits, bits, t->size);
  return o;
}

// A scalar from its container's bits: float8_e4m3fn_x4(0x3c3c3c3c).
PyObject* scalarTpNew(PyTypeObject* type, PyObject* args, PyObject* kwds) {
  MxType* t = nullptr;
  for (auto& c : g_types)
    if (type == &c.type) t = &c;
  unsigned long long v = 0;
  if (!PyArg_ParseTuple(args, "|K", &v)) return nullptr;
  uint8_t b[8];
  std::memcpy(b, &v, sizeof b);
  return scalarNew(t, b);
}

PyObject* scalarRepr(PyObject* o) {
  MxType* t = typeOfScalar(o);
  const auto* s = reinterpret_cast<MxScalar*>(o);
  char text[64];
  std::snprintf(
      text, sizeof text, t->size == 4 ? "%s(0x%08llx)" : "%s(0x%04llx)",
      t->name,
      static_cast<unsigned long long>(containerValue(s->bits, t->size)));
  return PyUnicode_FromString(text);
}

PyObject* scalarInt(PyObject* o) {
  MxType* t = typeOfScalar(o);
  return PyLong_FromUnsignedLongLong(
      containerValue(reinterpret_cast<MxScalar*>(o)->bits, t->size));
}

PyNumberMethods g_number = {};

PyObject* getitem(void* data, void* arr) {
  MxType* t = typeOfArray(arr);
  return scalarNew(t, data);
}

int setitem(PyObject* item, void* data, void* arr) {
  MxType* t = typeOfArray(arr);
  if (MxType* s = typeOfScalar(item)) {
    if (s != t) {
      PyErr_Format(PyExc_TypeError, "a %s element is not a %s", s->name,
                   t->name);
      return -1;
    }
    std::memcpy(data, reinterpret_cast<MxScalar*>(item)->bits, t->size);
    return 0;
  }
  if (PyLong_Check(item)) {  // the container's bits
    const unsigned long long v = PyLong_AsUnsignedLongLong(item);
    if (PyErr_Occurred()) return -1;
    if (t->size == 2 && v > 0xffffULL) {
      PyErr_SetString(PyExc_OverflowError, "a 16-bit container");
      return -1;
    }
    if (v > 0xffffffffULL) {
      PyErr_SetString(PyExc_OverflowError, "a 32-bit container");
      return -1;
    }
    std::memcpy(data, &v, t->size);
    return 0;
  }
  PyErr_Format(PyExc_TypeError,
               "%s elements are set from their container's bits (an int) or "
               "another element, not %s",
               t->name, Py_TYPE(item)->tp_name);
  return -1;
}

void swapBytes(uint8_t* p, int n) {
  for (int i = 0; i < n / 2; ++i) {
    const uint8_t c = p[i];
    p[i] = p[n - 1 - i];
    p[n - 1 - i] = c;
  }
}

void copyswapn(void* dst, npy_intp dstride, void* src, npy_intp sstride,
               npy_intp n, int swap, void* arr) {
  MxType* t = typeOfArray(arr);
  const int size = t ? t->size : 4;
  if (!src) {
    if (swap)
      for (npy_intp k = 0; k < n; ++k)
        swapBytes(static_cast<uint8_t*>(dst) + k * dstride, size);
    return;
  }
  for (npy_intp k = 0; k < n; ++k) {
    uint8_t* d = static_cast<uint8_t*>(dst) + k * dstride;
    std::memmove(d, static_cast<const uint8_t*>(src) + k * sstride, size);
    if (swap) swapBytes(d, size);
  }
}

void copyswap(void* dst, void* src, int swap, void* arr) {
  copyswapn(dst, 0, src, 0, 1, swap, arr);
}

npy_bool nonzero(void* data, void* arr) {
  MxType* t = typeOfArray(arr);
  const uint8_t* b = static_cast<const uint8_t*>(data);
  for (int i = 0; i < (t ? t->size : 4); ++i)
    if (b[i]) return NPY_TRUE;
  return NPY_FALSE;
}

int compare(const void* a, const void* b, void* arr) {
  MxType* t = typeOfArray(arr);
  const uint64_t x = containerValue(static_cast<const uint8_t*>(a), t->size);
  const uint64_t y = containerValue(static_cast<const uint8_t*>(b), t->size);
  return x < y ? -1 : x > y;
}

int registerType(PyObject* module, MxType& t) {
  PyTypeObject& ty = t.type;
  const PyTypeObject head = {PyVarObject_HEAD_INIT(nullptr, 0)};
  ty = head;
  ty.tp_name = t.tp_name;
  ty.tp_basicsize = sizeof(MxScalar);
  ty.tp_flags = Py_TPFLAGS_DEFAULT;
  ty.tp_doc =
      "An NKI MX packed element: four fp8 (fp4) values in one container.";
  ty.tp_new = scalarTpNew;
  ty.tp_repr = scalarRepr;
  ty.tp_str = scalarRepr;
  ty.tp_as_number = &g_number;
  ty.tp_base = &PyGenericArrType_Type;
  if (PyType_Ready(&ty) < 0) return -1;

  PyArray_InitArrFuncs(&t.funcs);
  t.funcs.getitem = getitem;
  t.funcs.setitem = setitem;
  t.funcs.copyswapn = copyswapn;
  t.funcs.copyswap = copyswap;
  t.funcs.nonzero = nonzero;
  t.funcs.compare = compare;

  PyArray_DescrProto& p = t.proto;
  Py_SET_TYPE(&p, &PyArrayDescr_Type);
  p.typeobj = &ty;
  p.kind = 'V';  // not a number NumPy may compute with
  p.type = t.size == 4 ? 'X' : 'x';
  p.byteorder = '=';
  p.flags = NPY_USE_GETITEM | NPY_USE_SETITEM;
  p.type_num = 0;
  p.elsize = t.size;
  p.alignment = t.size;
  p.subarray = nullptr;
  p.fields = nullptr;
  p.names = nullptr;
  p.f = &t.funcs;
  t.typenum = PyArray_RegisterDataType(&p);
  if (t.typenum < 0) return -1;
  Py_INCREF(&ty);
  return PyModule_AddObject(module, t.name, reinterpret_cast<PyObject*>(&ty));
}

PyModuleDef g_module = {PyModuleDef_HEAD_INIT, "_mx_numpy",
                        "NumPy element types of NKI's MX packed types.", -1,
                        nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__mx_numpy() {
  import_array();
  g_number.nb_int = scalarInt;
  g_number.nb_index = scalarInt;
  PyObject* m = PyModule_Create(&g_module);
  if (!m) return nullptr;
  for (auto& t : g_types) {
    if (registerType(m, t) < 0) {
      Py_DECREF(m);
      return nullptr;
    }
  }
  return m;
}
