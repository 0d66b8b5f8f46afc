/* vmmipc.Result (an IntEnum of vmmipc_result_t) and vmmipc.Error, whose
 * .code, .rank and message come from vmmipc_last_error_info. */
#include "vmp.h"

#include <stdarg.h>
#include <stdio.h>

static PyObject *vmp_Error;   /* vmmipc.Error */
static PyObject *vmp_Result;  /* vmmipc.Result */

/* Names without the VMMIPC_ERR_ prefix; numbers as in vmmipc.h. */
static const struct { const char *name; int value; } vmp_results[] = {
    {"SUCCESS", VMMIPC_SUCCESS},         {"INVALID_ARG", VMMIPC_ERR_INVALID_ARG},
    {"INVALID_DESC", VMMIPC_ERR_INVALID_DESC}, {"UNSUPPORTED", VMMIPC_ERR_UNSUPPORTED},
    {"CUDA", VMMIPC_ERR_CUDA},           {"MPI", VMMIPC_ERR_MPI},
    {"SYSTEM", VMMIPC_ERR_SYSTEM},       {"PEER", VMMIPC_ERR_PEER},
    {"TIMEOUT", VMMIPC_ERR_TIMEOUT},     {"NOT_EXPORTABLE", VMMIPC_ERR_NOT_EXPORTABLE},
    {"NO_MEMORY", VMMIPC_ERR_NO_MEMORY}, {"BUSY", VMMIPC_ERR_BUSY},
    {"RESOURCE", VMMIPC_ERR_RESOURCE},   {"ABORTED", VMMIPC_ERR_ABORTED},
};

static const char error_doc[] =
    "A vmmipc library call failed.\n\n"
    "Attributes:\n"
    "    code: the vmmipc.Result of the failure.\n"
    "    rank: the rank of the communicator to blame, or None.\n"
    "str(error) is the library's message (operation, rank or chunk, driver or OS error).";

static PyObject *make_result_enum(void) {
  PyObject *enum_mod = PyImport_ImportModule("enum");
  if (!enum_mod) return NULL;
  PyObject *members = PyList_New(0), *cls = NULL;
  if (!members) goto out;
  for (size_t i = 0; i < sizeof vmp_results / sizeof vmp_results[0]; i++) {
    PyObject *t = Py_BuildValue("(si)", vmp_results[i].name, vmp_results[i].value);
    if (!t || PyList_Append(members, t) < 0) {
      Py_XDECREF(t);
      goto out;
    }
    Py_DECREF(t);
  }
  PyObject *intenum = PyObject_GetAttrString(enum_mod, "IntEnum");
  if (!intenum) goto out;
  PyObject *args = Py_BuildValue("(sO)", "Result", members);
  PyObject *kw = Py_BuildValue("{s:s,s:s}", "module", "vmmipc", "qualname", "Result");
  if (args && kw) cls = PyObject_Call(intenum, args, kw);
  Py_XDECREF(args);
  Py_XDECREF(kw);
  Py_DECREF(intenum);
  if (cls) {
    PyObject *doc = PyUnicode_FromString("Result codes of the library (vmmipc_result_t without the VMMIPC_ERR_ prefix).");
    if (!doc || PyObject_SetAttrString(cls, "__doc__", doc) < 0) Py_CLEAR(cls);
    Py_XDECREF(doc);
  }
out:
  Py_XDECREF(members);
  Py_DECREF(enum_mod);
  return cls;
}

int vmp_error_init(PyObject *module) {
  vmp_Result = make_result_enum();
  if (!vmp_Result) return -1;
  PyObject *dict = Py_BuildValue("{s:O,s:O}", "code", Py_None, "rank", Py_None);
  if (!dict) return -1;
  vmp_Error = PyErr_NewExceptionWithDoc("vmmipc.Error", error_doc, NULL, dict);
  Py_DECREF(dict);
  if (!vmp_Error) return -1;
  Py_INCREF(vmp_Error);
  Py_INCREF(vmp_Result);
  if (PyModule_AddObject(module, "Error", vmp_Error) < 0) return -1;
  if (PyModule_AddObject(module, "Result", vmp_Result) < 0) return -1;
  return 0;
}

static PyObject *raise_with(vmmipc_result_t code, int rank, const char *message) {
  PyObject *pycode = PyObject_CallFunction(vmp_Result, "i", (int)code);
  if (!pycode) {  /* a code this module does not know: keep the number */
    PyErr_Clear();
    pycode = PyLong_FromLong((long)code);
  }
  PyObject *exc = pycode ? PyObject_CallFunction(vmp_Error, "s", message) : NULL;
  if (exc) {
    PyObject *pyrank = rank >= 0 ? PyLong_FromLong(rank) : (Py_INCREF(Py_None), Py_None);
    if (!pyrank || PyObject_SetAttrString(exc, "code", pycode) < 0 || PyObject_SetAttrString(exc, "rank", pyrank) < 0)
      Py_CLEAR(exc);
    Py_XDECREF(pyrank);
  }
  Py_XDECREF(pycode);
  if (exc) {
    PyErr_SetObject(vmp_Error, exc);
    Py_DECREF(exc);
  }
  return NULL;
}

void vmp_err_take(vmp_err_snap *s) {
  vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;
  s->code = VMMIPC_SUCCESS;
  s->rank = -1;
  s->msg[0] = '\0';
  if (vmmipc_last_error_info(&info) == VMMIPC_SUCCESS) {
    s->code = info.code;
    s->rank = info.rank;
  }
  const char *m = info.message && *info.message ? info.message : vmmipc_last_error();
  snprintf(s->msg, sizeof s->msg, "%s", m ? m : "");
}

PyObject *vmp_raise_snap(vmmipc_result_t r, const vmp_err_snap *s) {
  /* The thread's record describes this failure when its code matches. */
  int rank = s->code == r ? s->rank : -1;
  const char *msg = s->msg[0] ? s->msg : vmmipc_strerror(r);
  return raise_with(r, rank, msg);
}

PyObject *vmp_raise(vmmipc_result_t r) {
  vmp_err_snap s;
  vmp_err_take(&s);
  return vmp_raise_snap(r, &s);
}

static PyObject *raise_vfmt(vmmipc_result_t r, int rank, const char *fmt, va_list ap) {
  char buf[512];
  vsnprintf(buf, sizeof buf, fmt, ap);
  return raise_with(r, rank, buf);
}

PyObject *vmp_raise_msg(vmmipc_result_t r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  raise_vfmt(r, -1, fmt, ap);
  va_end(ap);
  return NULL;
}

PyObject *vmp_raise_msg_rank(vmmipc_result_t r, int rank, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  raise_vfmt(r, rank, fmt, ap);
  va_end(ap);
  return NULL;
}

void vmp_warn_resource(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  /* Called from deallocators: keep any pending exception. */
  VMP_ERR_SAVE(saved);
  if (PyErr_WarnEx(PyExc_ResourceWarning, buf, 1) < 0) PyErr_WriteUnraisable(NULL);
  VMP_ERR_RESTORE(saved);
}
