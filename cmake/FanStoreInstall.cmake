# Install rules, the CMake package (find_package(FanStore) -> FanStore::client) and the CPack .deb packages.
# Included by the top-level CMakeLists.txt after every library and tool is defined.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Every executable of the product folders is installed, so a new tool cannot be forgotten; tests/ holds only
# test programs and is not searched.
function(fanstore_executables_under dir out)
  set(found "")
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    if(type STREQUAL "EXECUTABLE")
      list(APPEND found ${t})
    endif()
  endforeach()
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    fanstore_executables_under(${sub} more)
    list(APPEND found ${more})
  endforeach()
  set(${out} ${found} PARENT_SCOPE)
endfunction()

set(FANSTORE_INSTALLED_PROGRAMS "")
foreach(dir fanstore interpose tools)
  fanstore_executables_under(${PROJECT_SOURCE_DIR}/${dir} exes)
  list(APPEND FANSTORE_INSTALLED_PROGRAMS ${exes})
endforeach()
# The docs check's table printer (tests/meta) is built with the CLI it reads, but is no program for users.
list(REMOVE_ITEM FANSTORE_INSTALLED_PROGRAMS fanstore_option_tables)
if(FANSTORE_TRAINER)
  fanstore_executables_under(${PROJECT_SOURCE_DIR}/trainer exes)
  list(APPEND FANSTORE_INSTALLED_PROGRAMS ${exes})
endif()
# Installed binaries keep the RPATH of libraries found outside the system directories (an MPI or oneDNN from an HPC
# module, say), so they run without LD_LIBRARY_PATH; system libraries need none and get none. (A property, not the
# CMAKE_ variable: the targets exist already.)
set(FANSTORE_INSTALLED_MODULES fanstore_preload fanstore_audit)
if(TARGET fanstore_trainer_cuda)
  list(APPEND FANSTORE_INSTALLED_MODULES fanstore_trainer_cuda)  # libfanstore-trainer-cuda.so, the trainer's CUDA backend
endif()
set_target_properties(${FANSTORE_INSTALLED_PROGRAMS} ${FANSTORE_INSTALLED_MODULES} PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
install(TARGETS ${FANSTORE_INSTALLED_PROGRAMS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
set(_fs_modules "libfanstore_preload.so, libfanstore_audit.so")
if(TARGET fanstore_trainer_cuda)
  string(APPEND _fs_modules ", libfanstore-trainer-cuda.so")
endif()
message(STATUS "FanStore: installs ${FANSTORE_INSTALLED_PROGRAMS}, ${_fs_modules}, the client library and its headers")

# The preload library, the loader's audit module (next to it) and the trainer's CUDA module sit in LIBDIR; `fanstore run` and fanstore-train find them
# relative to their own executable (BINDIR), so an installed prefix can be moved or copied anywhere. The build tree
# has the same bin/ + lib/ shape.
install(TARGETS ${FANSTORE_INSTALLED_MODULES} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime)
file(RELATIVE_PATH FANSTORE_PRELOAD_FROM_BIN ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
target_compile_definitions(fanstore PRIVATE FANSTORE_PRELOAD_FROM_BIN="${FANSTORE_PRELOAD_FROM_BIN}")
if(TARGET fanstore_trainer)
  set_source_files_properties(${PROJECT_SOURCE_DIR}/trainer/src/cuda_loader.cpp DIRECTORY ${PROJECT_SOURCE_DIR}/trainer
                              PROPERTIES COMPILE_DEFINITIONS FANSTORE_CUDA_MODULE_FROM_BIN="${FANSTORE_PRELOAD_FROM_BIN}")
endif()

# The client library for C++ programs: libfanstore_core.a, fanstore/include/fanstore/*.hpp and the package config.
set_target_properties(fanstore_core PROPERTIES EXPORT_NAME client)
add_library(FanStore::client ALIAS fanstore_core)
install(TARGETS fanstore_core EXPORT FanStoreTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# env_tooling.hpp (the scripts' and the tests' variables) stays out: the public API lists what the library reads.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/fanstore/include/fanstore DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT dev FILES_MATCHING PATTERN "*.hpp" PATTERN "env_tooling.hpp" EXCLUDE)
set(FANSTORE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/FanStore)
install(EXPORT FanStoreTargets NAMESPACE FanStore:: DESTINATION ${FANSTORE_CMAKE_DIR} COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/FanStoreConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/FanStoreConfig.cmake INSTALL_DESTINATION ${FANSTORE_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/FanStoreConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/FanStoreConfig.cmake ${PROJECT_BINARY_DIR}/FanStoreConfigVersion.cmake
        DESTINATION ${FANSTORE_CMAKE_DIR} COMPONENT dev)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT runtime)

# Debian packages (`cpack -G DEB` in the build directory): fanstore (programs, preload library) and fanstore-dev
# (client library, headers, CMake package). dpkg-shlibdeps derives the run-time dependencies from the binaries.
set(CPACK_PACKAGE_NAME fanstore)
set(CPACK_PACKAGE_VENDOR "FanStore")
set(CPACK_PACKAGE_CONTACT "FanStore maintainers <fanstore@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Read-only user-space file system for deep-learning I/O on HPC clusters")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_RESOURCE_FILE_README ${PROJECT_SOURCE_DIR}/README.md)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME fanstore)
set(CPACK_DEBIAN_DEV_PACKAGE_NAME fanstore-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# The static client library needs the headers and pkg-config files of its two dependencies to link.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libzstd-dev, libxxhash-dev, pkg-config")
# mpirun (for `fanstore serve` and multi-rank training) and fusermount3 (`fanstore mount` without root, unmounting)
# come with these; the libraries dpkg-shlibdeps finds do not pull them in.
set(CPACK_DEBIAN_RUNTIME_PACKAGE_RECOMMENDS "openmpi-bin, fuse3")
include(CPack)
cpack_add_component(runtime DISPLAY_NAME "FanStore programs and preload library" REQUIRED
                    DESCRIPTION "fanstore (pack, run, serve, mount, ...), fanstore-train, fanstore-datagen, the benchmark drivers, libfanstore_preload.so, libfanstore_audit.so and (in a CUDA build) the trainer's CUDA module libfanstore-trainer-cuda.so")
cpack_add_component(dev DISPLAY_NAME "FanStore client library, headers and CMake package" DEPENDS runtime
                    DESCRIPTION "libfanstore_core.a, fanstore/*.hpp and find_package(FanStore) -> FanStore::client")
